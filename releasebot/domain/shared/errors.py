"""The one error tree of releasebot.

Every error says what the caller does next by its branch::

    ReleasebotError
    ├── TemporaryError          retry later (``retry_after`` says how soon)
    │   ├── FeedUnavailableError     feed unreachable, timed out, 5xx, 429
    │   ├── StoreUnavailableError    the database cannot be reached right now
    │   ├── RegistryUnavailableError registry unreachable, timed out, 5xx, 429
    │   ├── ClusterUnavailableError  Kubernetes API unreachable, timed out, 5xx, 429
    │   ├── ChatUnavailableError     Slack unreachable, 5xx, 429
    │   └── SocketModeUnavailableError  no Socket Mode connection to Slack right now
    │
    └── PermanentError          record it and tell a human; retrying will not help
        ├── ConfigError              a setting is missing or invalid (names the key)
        ├── InvalidOptionError       an adapter was built with an invalid option (names it;
        │                            a ValueError too: a programming error when not from
        │                            the settings, which check every option first)
        ├── FeedRejectedError        the feed answered 4xx: wrong URL or no access
        ├── FeedFormatError          HTML, truncated JSON, wrong shape, bad version
        ├── VersionError             a string is not a valid Flatcar or driver version
        ├── InvalidTagError          a computed image tag breaks the OCI tag rule
        ├── StoreError               the database refused a write or is not migrated
        ├── RegistryAuthError        401/403 from the registry: credentials or rights
        ├── RegistryError            any other refusal by the registry (bad manifest…)
        │   └── DeleteRefusedError       the registry does not allow deletes (405/UNSUPPORTED)
        ├── ClusterRejectedError     the API server refused a request (403, 422…)
        │   └── ClusterForbiddenError    RBAC: names the verb and resource to grant
        ├── ChatRejectedError        Slack answered ok: false (token, scope, channel…)
        ├── SocketModeRejectedError  Slack refused the app token for Socket Mode
        ├── CommandError             a chat command that does not parse (says the usage)
        ├── UnknownTargetError       a hand-asked build names no known release
        ├── TargetBusyError          a hand-asked build of a target that is building, or
        │                            published (without --force)
        └── SigningError             a key is unusable, or a signature, SBOM or provenance
            │                        could not be attached
            └── VerificationError    what is attached does not check out against the key

``FeedError`` is a mixin carrying the feed's name for the feed errors on both branches.
Adapters translate third-party exceptions into these with ``raise ... from``; nothing from
httpx, SQLAlchemy or another SDK escapes the adapter that caught it.
"""

from __future__ import annotations

from datetime import timedelta


class ReleasebotError(Exception):
    """Base of every error releasebot raises on purpose. ``str()`` is one user-facing line."""


class TemporaryError(ReleasebotError):
    """The operation may succeed later; ``retry_after`` is the suggested delay."""

    def __init__(self, message: str, *, retry_after: timedelta = timedelta(minutes=1)) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(ReleasebotError):
    """Retrying the same operation will not help: a human has to change something."""


class ConfigError(PermanentError):
    """A configuration key is missing, unknown or invalid. The message names the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config: {key}: {problem}")
        self.key = key
        self.problem = problem


class VersionError(PermanentError):
    """A string is not a version of the expected form."""


class InvalidTagError(PermanentError):
    """A computed image tag would not be a valid OCI tag."""


class FeedError(ReleasebotError):
    """Mixin for errors about one feed; ``feed`` is its configured name."""

    def __init__(self, feed: str, problem: str, **kwargs: timedelta) -> None:
        super().__init__(f"feed {feed}: {problem}", **kwargs)
        self.feed = feed
        self.problem = problem


class FeedUnavailableError(FeedError, TemporaryError):
    """The feed could not be read right now (network, timeout, 5xx, 429)."""


class FeedRejectedError(FeedError, PermanentError):
    """The feed answered with a 4xx status: the URL or the access is wrong."""


class FeedFormatError(FeedError, PermanentError):
    """The feed's body is not what the feed's format promises."""


class StoreUnavailableError(TemporaryError):
    """The state store cannot be reached right now."""


class StoreError(PermanentError):
    """The state store is misconfigured, not migrated, or refused the data."""


class RegistryUnavailableError(TemporaryError):
    """The registry could not answer right now (network, timeout, 5xx, 429)."""


class RegistryAuthError(PermanentError):
    """The registry refused our credentials (401/403); the message names the registry."""


class RegistryError(PermanentError):
    """The registry refused a request for another reason."""


class DeleteRefusedError(RegistryError):
    """The registry does not allow deleting manifests (405, or ``UNSUPPORTED``)."""


class ClusterUnavailableError(TemporaryError):
    """The Kubernetes API server could not answer right now."""


class ClusterRejectedError(PermanentError):
    """The Kubernetes API server refused a request (forbidden, invalid, quota)."""


class ClusterForbiddenError(ClusterRejectedError):
    """RBAC refused a request (403): the message names the verb and resource to grant."""

    def __init__(self, verb: str, resource: str, group: str, detail: str = "") -> None:
        api_group = group or "core"
        super().__init__(
            f"kubernetes: forbidden to {verb} {resource} ({api_group} API group): grant "
            f"releasebot's ServiceAccount {verb!r} on {resource!r}"
            + (f" ({detail})" if detail else "")
        )
        self.verb = verb
        self.resource = resource
        self.group = group


class UnknownTargetError(PermanentError):
    """``releasebot build`` named a driver or Flatcar version the store has never seen."""


class ChatUnavailableError(TemporaryError):
    """Slack could not take the call now (network, timeout, 5xx, 429, ``ratelimited``).

    ``retry_after`` is Slack's own ``Retry-After`` when it gave one, else zero: the
    caller's backoff decides.
    """

    def __init__(self, message: str, *, retry_after: timedelta = timedelta(0)) -> None:
        super().__init__(message, retry_after=retry_after)


class ChatRejectedError(PermanentError):
    """Slack refused the call (``ok: false``); ``code`` is Slack's error code.

    ``affects_all`` says whether every call would fail alike (token, scopes, channel).
    """

    def __init__(
        self, method: str, code: str, *, hint: str | None = None, affects_all: bool = False
    ) -> None:
        super().__init__(f"slack {method}: {code}" + (f" ({hint})" if hint else ""))
        self.method = method
        self.code = code
        self.affects_all = affects_all


class SocketModeUnavailableError(TemporaryError):
    """Slack could not open a Socket Mode connection right now (network, 5xx, rate limit)."""


class SocketModeRejectedError(PermanentError):
    """Slack refused the app token (invalid, revoked, or not an app-level token)."""


class InvalidOptionError(PermanentError, ValueError):
    """An adapter's option is invalid; ``field`` names it for the settings layer.

    The settings check every option with the same rules before any adapter is built, so
    outside of tests this means a programming error; it is a ``ValueError`` for that reason.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class CommandError(PermanentError):
    """The text is not a valid chat command; ``str()`` is a short message for the chat user.

    The message never repeats characters outside the allowed set, so it is safe to show.
    """


class TargetBusyError(PermanentError):
    """A hand-asked build of a target that is building, or published without --force."""


class SigningError(PermanentError):
    """An image could not be signed: the key is missing or malformed, or the registry
    refused a signature, SBOM or provenance. The message never holds key material."""


class VerificationError(SigningError):
    """The signatures, SBOM or provenance attached to an image do not check out against
    the public key (missing, tampered with, or made by another key)."""
