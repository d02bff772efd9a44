"""``RunHooks``: what other features plug into ``releasebot run``, every one optional.

The run wiring (``wiring.run``) calls these and knows nothing of Slack; the Slack wiring
(``wiring.slack``) fills them in and knows nothing of the scheduler. Both import this
module, and neither the other, so the wiring has no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from releasebot.web.server import SlackHandler


@dataclass(frozen=True)
class RunHooks:
    """``on_lead_start``/``on_lead_stop`` run on the scheduler's lease thread when this
    process gains or loses the leadership (and ``on_lead_stop`` at shutdown): start and
    stop Socket Mode there, without blocking. ``deliver`` runs every few seconds on the
    leader only. ``socket_connected`` feeds /readyz on the leader (``None``: not used).
    ``slack`` answers ``POST /slack/commands`` from the raw body and headers.
    """

    on_lead_start: Callable[[], None] = lambda: None
    on_lead_stop: Callable[[], None] = lambda: None
    deliver: Callable[[], object] = lambda: None
    socket_connected: Callable[[], bool | None] = lambda: None
    slack: SlackHandler | None = None
