"""Credentials taken out of text before it leaves the process: one rule, every exit.

Text leaves releasebot through a handful of exits: the one-shot commands' ``releasebot:``
lines, the service's log records (text or JSON, tracebacks included), the ``/readyz`` body,
the Slack messages, and every exception's message on its way to one of those. Each exit
passes its text through ``redact`` (or a ``Redactor`` holding the secrets it knows), so a
credential is masked whichever way it got into the text:

- by its form, even when no secret value is known (a library quoting a URL, a DSN typed
  into a setting that failed to parse): URL userinfo (``scheme://user:***@host``), query
  parameters whose name says credential (``password``, ``sslpassword``, ``passfile``,
  ``token``, ``access_token``, ``secret``, ``key``, ``sig``, ``X-Amz-Signature``...), the
  libpq keyword/value form (``password=...`` or ``password='a b'``), JSON members of those
  names, ``Authorization:`` headers and bare ``Bearer`` credentials, and the token shapes
  releasebot itself holds (Slack ``xox?-`` and ``xapp-`` tokens);
- by its value, for the secrets the settings hold (``Redactor(values)``), in plain and in
  percent-encoded form (a password inside a URL is usually encoded).

Masking errs on the side of hiding: a parameter called ``monkey`` loses its value too.
Deliberately not here: making the text one line or bounded (``edge.text``), and knowing
which settings are secret (the wiring lists them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"
MIN_SECRET_CHARS = 4
"""Shorter known values are not masked by value: masking every "a" or "10" would garble
the text (their forms are still masked)."""

_SENSITIVE = re.compile(
    r"(?i)pass(?:word|wd|phrase|file)?|pwd|secret|token|key|sig|credential|auth|session"
)
"""Parameter names that carry a credential: any name containing one of these words."""

# Every pattern below runs in time linear in the text, whatever the text: starts are
# anchored by a lookbehind or a literal, names and quoted values are bounded. A hostile
# message (a megabyte of "tokentoken...") must not cost a log line seconds.
_NAME = r"(?P<name>[\w.-]{1,64})"
_QUOTED = r"'(?:[^'\\\n]|\\.){0,512}'|\"(?:[^\"\\\n]|\\.){0,512}\""

_URL_USERINFO = re.compile(
    r"(?P<head>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://[^/?#@\s:'\"<>]*)"
    r":[^/?#\s'\"<>]*@"
)
"""``scheme://user:password@``: the password part (up to the last '@' before the host, so
an unencoded '@' inside the password is masked too)."""
_URL_TOKEN_ONLY = re.compile(
    r"(?P<head>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://)"
    r"(?:gh[pousr]_|glpat-|xox[a-z]-)[^/?#@\s]*@"
)
"""``https://<token>@host``: a token standing alone as the user name."""
_QUERY = re.compile(rf"(?P<head>[?&;]{_NAME}=)[^&#;=\s'\"<>]*")
"""``?password=...``, ``&access_token=...``: a query parameter of a credential's name."""
_KEYWORD = re.compile(rf"(?P<head>(?<![\w.?&;/-]){_NAME}\s*=\s*)(?:{_QUOTED}|[^\s&#;,='\"<>)]+)")
"""libpq's ``password=secret`` / ``password = 'a b'`` and any ``name=value`` of those names."""
_JSON_MEMBER = re.compile(rf"(?P<head>[\"']{_NAME}[\"']\s*:\s*)(?:{_QUOTED})")
"""``"password": "..."`` in a JSON (or a Python dict's) text."""
_AUTHORIZATION = re.compile(
    r"(?i)(?P<head>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z-]{1,32}\s+)?)"
    r"[^\s\"',;}\]]+"
)
_BEARER = re.compile(r"(?i)(?P<head>\bbearer\s+)[A-Za-z0-9._~+/=-]{4,}")
_TOKEN_SHAPES = re.compile(
    r"\b(?:xox[abposr]-[A-Za-z0-9-]{6,}|xapp-[A-Za-z0-9-]{6,}|gh[pousr]_[A-Za-z0-9]{16,}"
    r"|glpat-[A-Za-z0-9_-]{16,})"
)
_NAMED = (_QUERY, _KEYWORD, _JSON_MEMBER)
"""Patterns that match any name: only a credential's name has its value masked."""

_PATTERNS = (
    (("://",), _URL_USERINFO),
    (("://",), _URL_TOKEN_ONLY),
    (("=",), _QUERY),
    (("=",), _KEYWORD),
    ((":",), _JSON_MEMBER),
    (("authorization",), _AUTHORIZATION),
    (("bearer",), _BEARER),
    (("xox", "xapp-", "gh", "glpat-"), _TOKEN_SHAPES),
)
"""Each pattern with the (lower-case) text it cannot match without: most lines hold none
of it, and a substring test is far cheaper than a scan by the regex engine."""


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential (by form, and the given ``secrets`` by value) masked."""
    values = _variants(secrets)
    return _redact(text, values)


class Redactor:
    """``redact`` with the secrets one process knows; ``learn`` adds more later (a command
    knows its secrets only once its settings are loaded)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._values: list[str] = []
        self.learn(secrets)

    def learn(self, secrets: Iterable[str]) -> None:
        self._values = _variants([*self._values, *secrets])

    @property
    def knows_values(self) -> bool:
        return bool(self._values)

    def __call__(self, text: str) -> str:
        return _redact(text, self._values)


def _redact(text: str, values: list[str]) -> str:
    for value in values:  # by value first: the forms below may split a value apart
        if value in text:
            text = text.replace(value, MASK)
    lowered = text.lower()
    for needles, pattern in _PATTERNS:
        if any(needle in lowered for needle in needles):
            text = pattern.sub(_keep_head, text)
    return text


def _keep_head(match: re.Match[str]) -> str:
    if match.re is _TOKEN_SHAPES:
        return MASK
    head = match.group("head")
    if match.re in _NAMED and not _SENSITIVE.search(match.group("name")):
        return match.group(0)
    if match.re is _URL_USERINFO:
        return f"{head}:{MASK}@"
    if match.re is _URL_TOKEN_ONLY:
        return f"{head}{MASK}@"
    if match.re is _JSON_MEMBER:  # the text stays JSON
        return f'{head}"{MASK}"'
    return f"{head}{MASK}"


def _variants(secrets: Iterable[str]) -> list[str]:
    """Every known value with its percent-encoded forms, longest first (a secret holding
    another is masked whole)."""
    found: set[str] = set()
    for secret in secrets:
        secret = secret.strip() if isinstance(secret, str) else ""
        if len(secret) < MIN_SECRET_CHARS:
            continue
        found.update({secret, quote(secret, safe=""), quote_plus(secret, safe="")})
    return sorted(found, key=len, reverse=True)
