"""The OCI distribution grammar of names (``domain/shared/references.py``): what may go into a
registry URL. Tags, repository paths and digests the spec allows pass; every name that
could change a URL's meaning (``/``, ``..``, ``?``, ``#``, ``%``, whitespace, controls,
non-ASCII, wrong lengths or case) is refused, and a refused name is shown bounded, on one
line and without control characters.
"""

from __future__ import annotations

import pytest

from releasebot.domain.shared.references import (
    SHOWN_CHARS,
    is_digest,
    is_reference,
    is_repository_path,
    is_sha256_digest,
    is_tag,
    shown,
)

HEX = "0123456789abcdef" * 4

GOOD_TAGS = ["580.82.07-flatcar4081.2.0", "latest", "_x", "A", "v1_ok.-x", "a" * 128, "0"]
BAD_TAGS = [
    "",
    "../../../other/repo/manifests/X",
    "x?digest=sha256:" + HEX,
    "a/b",
    "..",
    ".hidden",
    "-dash",
    "%2e%2e",
    "x#frag",
    "x y",
    "x\n",
    "\x1b[31mred",
    "café",
    "\uff58",  # fullwidth x
    "a" * 129,
    "sha256:" + HEX,
]
GOOD_PATHS = ["nvidia/driver", "a", "a.b/c_d/e__f/g-h/i---j", "0/1"]
BAD_PATHS = [
    "",
    "Nvidia/driver",
    "nvidia//driver",
    "/nvidia",
    "nvidia/",
    "nvidia/../x",
    "a..b",
    "a___b",
    "a_-b",
    "a.-b",
    "-a",
    "a-",
    "a?b",
    "a%2fb",
    "a b",
    "ä",
    "a/" * 128 + "a",
]
GOOD_DIGESTS = ["sha256:" + HEX, "sha512:" + HEX * 2]
BAD_DIGESTS = [
    "sha256:" + HEX.upper(),
    "sha256:" + HEX[:-1],
    "sha256:" + HEX + "0",
    "sha256:" + HEX + "\n",
    "sha256:../../" + HEX[6:],
    "sha384:" + HEX,
    "md5:" + HEX[:32],
    "SHA256:" + HEX,
    "sha256" + HEX,
    "sha256:" + "\u0660" * 64,  # Arabic-Indic zeros
    "sha512:" + HEX,
]


@pytest.mark.parametrize("tag", GOOD_TAGS)
def test_tags_of_the_grammar_pass(tag: str) -> None:
    assert is_tag(tag)
    assert is_reference(tag)


@pytest.mark.parametrize("tag", BAD_TAGS)
def test_names_outside_the_tag_grammar_are_refused(tag: str) -> None:
    assert not is_tag(tag)


@pytest.mark.parametrize("path", GOOD_PATHS)
def test_repository_paths_of_the_grammar_pass(path: str) -> None:
    assert is_repository_path(path)


@pytest.mark.parametrize("path", BAD_PATHS)
def test_repository_paths_outside_the_grammar_are_refused(path: str) -> None:
    assert not is_repository_path(path)


@pytest.mark.parametrize("digest", GOOD_DIGESTS)
def test_digests_of_registered_algorithms_pass(digest: str) -> None:
    assert is_digest(digest)
    assert is_reference(digest)
    assert is_sha256_digest(digest) == digest.startswith("sha256:")


@pytest.mark.parametrize("digest", BAD_DIGESTS)
def test_digests_outside_the_grammar_are_refused(digest: str) -> None:
    assert not is_digest(digest)
    assert not is_sha256_digest(digest)
    assert not is_reference(digest) or is_tag(digest)


@pytest.mark.parametrize("value", [None, 7, b"latest", ["latest"]])
def test_what_is_not_text_is_no_name(value: object) -> None:
    assert not is_tag(value)
    assert not is_digest(value)
    assert not is_repository_path(value)


def test_a_refused_name_is_shown_short_on_one_line_without_controls() -> None:
    text = shown("\x1b[2J../x\r\n" + "y" * 500)
    for control in ("\x1b", "\n", "\r"):
        assert control not in text
    assert len(text) <= SHOWN_CHARS + 2
