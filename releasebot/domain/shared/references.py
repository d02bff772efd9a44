"""The OCI distribution grammar of names: tags, repository paths, digests, in one place.

Why it exists: every registry URL releasebot builds has a name in it (``/v2/<repository>/
manifests/<tag or digest>``, ``blobs/<digest>``, ``referrers/<digest>``), and many of those
names come from outside: a tag listing, a referrers answer, a digest header, an index's
``manifests``, the settings. A name such as ``../../other/repo/manifests/x`` or
``x?digest=...`` would send releasebot's credentials to another repository or change what
the request means. So a name from outside is used only when it matches the distribution
spec's grammar, checked by the functions here and nowhere else:

- tag: ``[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}``;
- repository path: components ``[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*`` joined by ``/``;
- digest: ``algorithm:encoded`` for the algorithms the spec registers, with their exact
  length in lower-case hex (``sha256``: 64, ``sha512``: 128). releasebot writes and expects
  sha256 only (``is_sha256_digest``); others are valid names it does not produce.

None of these can hold ``/``, ``?``, ``#``, ``%``, whitespace or anything non-ASCII, so a
checked name is safe in a URL path as it is. ``shown`` is how a refused name appears in a
message: bounded, one line, no control characters.

Deliberately not here: the registry host (``builders.kaniko.check_repository`` checks the
whole setting, with this path grammar), deciding what to do with a refused name (the
adapters skip it with one line, or refuse the call).
"""

from __future__ import annotations

import re

from releasebot.domain.shared.untrusted import quoted

PATH_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
"""One component of a repository path (the spec's ``path-component``)."""
TAG = r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}"
"""A tag: at most 128 characters, no leading ``.`` or ``-``."""
SHA256 = r"sha256:[0-9a-f]{64}"
"""The one digest form releasebot writes."""
_TAG = re.compile(TAG)
_REPOSITORY_PATH = re.compile(rf"{PATH_COMPONENT}(?:/{PATH_COMPONENT})*")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}")
_SHA256 = re.compile(SHA256)
MAX_REPOSITORY_PATH = 255
"""The spec lets registries refuse longer repository names; releasebot refuses them too."""
SHOWN_CHARS = 80
"""How much of a refused name a message quotes."""


def is_tag(text: object) -> bool:
    return isinstance(text, str) and _TAG.fullmatch(text) is not None


def is_repository_path(text: object) -> bool:
    return (
        isinstance(text, str)
        and len(text) <= MAX_REPOSITORY_PATH
        and _REPOSITORY_PATH.fullmatch(text) is not None
    )


def is_digest(text: object) -> bool:
    """A digest of a registered algorithm, in its canonical form."""
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


def is_sha256_digest(text: object) -> bool:
    """The only digests releasebot writes: ``sha256:`` and 64 lower-case hex."""
    return isinstance(text, str) and _SHA256.fullmatch(text) is not None


def is_reference(text: object) -> bool:
    """What may follow ``manifests/``: a tag or a digest."""
    return is_tag(text) or is_digest(text)


def shown(text: object) -> str:
    """A refused name for a message: quoted, one line, control characters removed, short."""
    return quoted(text, limit=SHOWN_CHARS)
