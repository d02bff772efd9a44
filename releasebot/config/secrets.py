"""Every secret value the settings hold, for the exits that mask them (``edge.redact``).

The log filter of ``releasebot run``, the CLI's error lines and the ``/readyz`` body mask
credentials by their form anyway; this list adds masking by value, for a secret that
reaches a message in no recognisable form (a token echoed by a server, a password a
library quotes bare). Not here: reading files the features read themselves only when on
(an unreadable token file is that feature's error to report).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

from releasebot.config.sections import Settings
from releasebot.domain.shared.errors import ConfigError

_SECRET_PARAMETERS = ("password", "sslpassword", "sslkey_password", "token", "secret")


def secret_values(settings: Settings) -> list[str]:
    """The registry and signing passwords, the Slack tokens, the database URL's passwords."""
    values = [settings.registry.password, settings.signing.password]
    values += database_secrets(settings.database.url)
    for name in ("bot_token", "signing_secret", "app_token"):
        try:
            values.append(settings.slack.secret(name))
        except ConfigError:  # an unreadable file: the feature using it reports that
            continue
    return [value for value in values if value]


def database_secrets(url: str) -> list[str]:
    """The password in a database URL's userinfo and in its query (``?password=``,
    ``sslpassword=``), decoded (the encoded form is masked by ``edge.redact`` too)."""
    try:
        parts = urlsplit(url)
        values = [unquote(parts.password)] if parts.password else []
        pairs = parse_qsl(parts.query, keep_blank_values=False)
    except ValueError:  # not a URL at all: its forms are still masked
        return []
    values += [value for name, value in pairs if name.lower() in _SECRET_PARAMETERS]
    return values
