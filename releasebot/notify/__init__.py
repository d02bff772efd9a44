"""Notifications: build and feed events told in chat, one message per build, edited in place.

- ``render``: pure Block Kit rendering of a key's events (``render_message``) and of one
  event's thread reply (``render_thread_reply``);
- ``slack``: ``SlackNotifier``, delivering one stored event through slack-sdk's
  ``WebClient`` (``make_web_client`` builds it with bounded retry handlers).

When to deliver, in which order, and what to do on failure is the service's business
(``service/notifications.py``). Importing this package imports neither module; it holds
what Slack's error codes mean (``ChatRejectedError`` lives in ``domain/shared/errors.py``).
"""

from __future__ import annotations

# Codes that fail every call alike (the token, the app's rights, the channel): the service
# stops its round on them instead of failing each pending event in turn.
EVERY_CALL = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "missing_scope",
        "no_permission",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "team_access_not_granted",
        "ekm_access_denied",
    }
)

HINTS = {
    "invalid_auth": "the bot token is wrong (slack.bot_token)",
    "not_authed": "no bot token was sent (slack.bot_token)",
    "account_inactive": "the bot token belongs to a deactivated app or user",
    "token_revoked": "the bot token was revoked: reinstall the app",
    "token_expired": "the bot token expired: reinstall the app",
    "missing_scope": "the app lacks a scope (chat:write, channels:history, groups:history)",
    "channel_not_found": "slack.channel names no channel the bot can see",
    "not_in_channel": "invite the bot to the channel (/invite @releasebot)",
    "is_archived": "the channel is archived",
    "msg_too_long": "the message is too long (a rendering bug)",
    "invalid_blocks": "Slack refused the blocks (a rendering bug)",
}
