"""The only package that names concrete adapters: it turns ``Settings`` into working objects.

``core`` builds the stores, feeds, registry, cluster launcher and the reconcile service;
``run`` wires the long-running mode; ``slack`` the notifications and the chat command.
The CLI imports from here; nothing here connects at import time.
"""

from releasebot.wiring.core import (
    db_current,
    db_downgrade,
    db_upgrade,
    demo_settings,
    open_store,
    plan_service,
    reconcile_service,
    utc_now,
)
from releasebot.wiring.run import guarded, run_identity, run_service

__all__ = [
    "db_current",
    "db_downgrade",
    "db_upgrade",
    "demo_settings",
    "guarded",
    "open_store",
    "plan_service",
    "reconcile_service",
    "run_identity",
    "run_service",
    "utc_now",
]
