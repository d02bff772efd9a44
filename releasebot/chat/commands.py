"""Parse the text of a ``/releasebot`` chat command into a validated ``Command``.

Chat text is untrusted: it reaches build Jobs, the registry and the store only as values
this module has checked. The grammar is deliberately small and strict: the text may hold
letters, digits, ``.``, ``-``, ``_``, spaces and tabs, nothing else (so no ``;``, quotes,
backticks, ``$(``, slashes or newlines), and at most ``MAX_TEXT_LENGTH`` characters. Each
argument must match its pattern: driver versions as ``DriverVersion``, Flatcar versions as
``FlatcarVersion``, arches from ``Arch``, tags by the OCI tag rule AND as
``<driver>-flatcar<flatcar>``, the only tags releasebot builds.

Pure: no I/O, no Slack. It does not decide who may run a command (``chat.slack`` does) nor
what a command does (``service.commands`` does); the vocabulary both share, ``Command`` and
its ``Verb``, is the domain's (``domain.targets.commands``).
"""

from __future__ import annotations

import re

from releasebot.domain.shared.errors import CommandError
from releasebot.domain.shared.versions import Arch, DriverVersion, FlatcarVersion, is_oci_tag
from releasebot.domain.targets.commands import USAGE, Command, Verb

MAX_TEXT_LENGTH = 200
"""Characters of command text accepted; the longest valid command is about 60."""

_ALLOWED_TEXT = re.compile(r"[A-Za-z0-9._ \t-]*")
_TAG_SEPARATOR = "-flatcar"


_EXAMPLES = {
    Verb.BUILD: "e.g. build 580.95.05 4593.2.4 amd64",
    Verb.RETRY: "e.g. retry 580.95.05-flatcar4593.2.4",
    Verb.REBUILD: "e.g. rebuild 580.95.05-flatcar4593.2.4",
    Verb.RELEASE: "e.g. release gpu-node-7",
}
_NODE_NAME = re.compile(
    r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*"
)


def parse_command(text: str) -> Command:
    """The command ``text`` asks for; ``CommandError`` with a helpful message if invalid.

    Empty text is ``help``. The verb is case-insensitive, arguments are not.
    """
    if len(text) > MAX_TEXT_LENGTH:
        raise CommandError(f"That is too long for a command (at most {MAX_TEXT_LENGTH} chars).")
    if _ALLOWED_TEXT.fullmatch(text) is None:
        raise CommandError(
            "Commands may only hold letters, digits, '.', '-', '_' and spaces. " + _hint()
        )
    words = text.split()
    if not words:
        return Command(Verb.HELP)
    try:
        verb = Verb(words[0].lower())
    except ValueError:
        raise CommandError(f"I don't know the command {_shown(words[0])}. {_hint()}") from None
    arguments = words[1:]
    if verb is Verb.BUILD:
        return _build(arguments)
    if verb in (Verb.RETRY, Verb.REBUILD):
        return _retry(arguments, verb)
    if verb is Verb.RELEASE:
        return _release(arguments)
    if arguments:
        raise CommandError(f"{verb.value} takes no arguments. Usage: {USAGE[verb]}")
    return Command(verb)


def _build(arguments: list[str]) -> Command:
    if len(arguments) not in (2, 3):
        raise _usage(Verb.BUILD, "needs a driver version, a Flatcar version and maybe an arch")
    driver, flatcar, *rest = arguments
    if not DriverVersion.is_valid(driver):
        raise _usage(Verb.BUILD, f"{_shown(driver)} is not a driver version like 580.95.05")
    if not FlatcarVersion.is_valid(flatcar):
        raise _usage(Verb.BUILD, f"{_shown(flatcar)} is not a Flatcar version like 4593.2.4")
    arch = None
    if rest:
        try:
            arch = Arch(rest[0])
        except ValueError:
            arches = " or ".join(a.value for a in Arch)
            raise _usage(Verb.BUILD, f"{_shown(rest[0])} is not an arch ({arches})") from None
    return Command(Verb.BUILD, driver=driver, flatcar=flatcar, arch=arch)


def _release(arguments: list[str]) -> Command:
    if len(arguments) != 1:
        raise _usage(Verb.RELEASE, "needs exactly one node name")
    [node] = arguments
    if len(node) > 253 or _NODE_NAME.fullmatch(node) is None:
        raise _usage(Verb.RELEASE, f"{_shown(node)} is not a node name")
    return Command(Verb.RELEASE, node=node)


def _retry(arguments: list[str], verb: Verb = Verb.RETRY) -> Command:
    if len(arguments) != 1:
        raise _usage(verb, "needs exactly one image tag")
    [tag] = arguments
    driver, separator, flatcar = tag.partition(_TAG_SEPARATOR)
    if not (
        is_oci_tag(tag)
        and separator
        and DriverVersion.is_valid(driver)
        and FlatcarVersion.is_valid(flatcar)
    ):
        raise _usage(verb, f"{_shown(tag)} is not a tag like <driver>-flatcar<version>")
    return Command(verb, tag=tag)


def _usage(verb: Verb, problem: str) -> CommandError:
    example = _EXAMPLES.get(verb, "")
    return CommandError(f"{verb.value}: {problem}. Usage: {USAGE[verb]} ({example})")


def _shown(word: str) -> str:
    """``word`` quoted for a message; only ever called on text of the allowed characters."""
    return f"'{word[:40]}'" if len(word) <= 40 else f"'{word[:40]}…'"


def _hint() -> str:
    return "Try: " + ", ".join(verb.value for verb in Verb) + " (help explains each)."
