"""``parse_command``: every subcommand, strict versions, tags and arches, the length limit,
and injection attempts (shell metacharacters, backticks, ``$(...)``, newlines) refused
with a short message that does not echo what it refused."""

from __future__ import annotations

import pytest

from releasebot.chat.commands import MAX_TEXT_LENGTH, parse_command
from releasebot.domain.shared.errors import CommandError, PermanentError
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.commands import HELP_TEXT, Command, Verb


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("status", Command(Verb.STATUS)),
        ("plan", Command(Verb.PLAN)),
        ("missing", Command(Verb.MISSING)),
        ("pause", Command(Verb.PAUSE)),
        ("resume", Command(Verb.RESUME)),
        ("help", Command(Verb.HELP)),
        ("", Command(Verb.HELP)),
        ("   ", Command(Verb.HELP)),
        ("  STATUS\t", Command(Verb.STATUS)),
        ("build 580.95.05 4593.2.4", Command(Verb.BUILD, driver="580.95.05", flatcar="4593.2.4")),
        (
            "build  580.95.05\t4593.2.4 arm64",
            Command(Verb.BUILD, driver="580.95.05", flatcar="4593.2.4", arch=Arch.ARM64),
        ),
        ("build 580.65 4593.2.4 amd64", Command(Verb.BUILD, "580.65", "4593.2.4", Arch.AMD64)),
        (
            "retry 580.178.04-flatcar4593.2.5",
            Command(Verb.RETRY, tag="580.178.04-flatcar4593.2.5"),
        ),
        (
            "rebuild 580.178.04-flatcar4593.2.5",
            Command(Verb.REBUILD, tag="580.178.04-flatcar4593.2.5"),
        ),
        ("release gpu-node-7", Command(Verb.RELEASE, node="gpu-node-7")),
        (
            "release ip-10-0-1-7.ec2.internal",
            Command(Verb.RELEASE, node="ip-10-0-1-7.ec2.internal"),
        ),
    ],
)
def test_valid_commands(text: str, expected: Command) -> None:
    assert parse_command(text) == expected


def test_canonical_text_is_the_normalised_command() -> None:
    command = parse_command("BUILD   580.95.05 4593.2.4\tamd64")
    assert str(command) == "build 580.95.05 4593.2.4 amd64"
    assert str(parse_command("retry 580.95.05-flatcar4593.2.4")) == (
        "retry 580.95.05-flatcar4593.2.4"
    )


def test_what_changes_and_what_is_slow() -> None:
    assert {verb for verb in Verb if verb.mutates} == {
        Verb.BUILD,
        Verb.RETRY,
        Verb.REBUILD,
        Verb.RELEASE,
        Verb.PAUSE,
        Verb.RESUME,
    }
    assert {verb for verb in Verb if verb.slow} == {
        Verb.PLAN,
        Verb.MISSING,
        Verb.BUILD,
        Verb.RETRY,
        Verb.REBUILD,
    }


def test_help_lists_every_subcommand() -> None:
    assert [line.split()[0].rstrip(":") for line in HELP_TEXT.splitlines()] == [
        verb.value for verb in Verb
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deploy", "I don't know the command 'deploy'"),
        ("status now", "status takes no arguments"),
        ("pause 10", "pause takes no arguments"),
        ("build", "build: needs a driver version"),
        ("release", "release: needs exactly one node name"),
        ("release Gpu_0", "release: 'Gpu_0' is not a node name"),
        ("release a b", "release: needs exactly one node name"),
        ("rebuild gpu-0", "rebuild: 'gpu-0' is not a tag"),
        ("build 580.95.05", "build: needs a driver version"),
        ("build 580.95.05 4593.2.4 amd64 extra", "build: needs a driver version"),
        ("build 580 4593.2.4", "'580' is not a driver version"),
        ("build 580.95.05.1 4593.2.4", "'580.95.05.1' is not a driver version"),
        ("build 0580.95.05 4593.2.4", "is not a driver version"),
        ("build 4593.2.4 580.95.05", "'580.95.05' is not a Flatcar version"),
        ("build 580.95.05 4593.2", "'4593.2' is not a Flatcar version"),
        ("build 580.95.05 4593.02.4", "'4593.02.4' is not a Flatcar version"),
        ("build 580.95.05 4593.2.4 x86_64", "'x86_64' is not an arch (amd64 or arm64)"),
        ("build 580.95.05 4593.2.4 AMD64", "'AMD64' is not an arch"),
        ("retry", "retry: needs exactly one image tag"),
        ("retry a b", "retry: needs exactly one image tag"),
        ("retry latest", "'latest' is not a tag like"),
        ("retry 580.95.05-flatcar4593.2.4-amd64", "is not a tag like"),
        ("retry 580.95.05-flatcar", "is not a tag like"),
        ("retry -flatcar4593.2.4", "is not a tag like"),
        ("retry 580.95.05flatcar4593.2.4", "is not a tag like"),
        ("retry 580.95.05-FLATCAR4593.2.4", "is not a tag like"),
    ],
)
def test_invalid_commands_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_command(text)
    assert message in str(caught.value)
    assert isinstance(caught.value, PermanentError)


CHARSET_MESSAGE = (
    "Commands may only hold letters, digits, '.', '-', '_' and spaces. "
    "Try: status, plan, missing, build, retry, rebuild, release, pause, resume, help "
    "(help explains each)."
)


@pytest.mark.parametrize(
    "text",
    [
        "build 580.1; rm -rf / 4593.2.5",
        "build 580.95.05 4593.2.4;reboot",
        "build `id` 4593.2.4",
        "build $(id) 4593.2.4",
        "build 580.95.05 4593.2.4 && curl evil",
        "build 580.95.05 4593.2.4 | sh",
        "retry 580.95.05-flatcar4593.2.4'",
        'retry "580.95.05-flatcar4593.2.4"',
        "status\nbuild 580.95.05 4593.2.4",
        "build 580.95.05\r4593.2.4",
        "build 580.95.05 4593.2.4 amd64\x00",
        "build 580.95.05 ../../etc/passwd",
        "retry <!channel>",
        "build 580.95.05\u00a04593.2.4",
        "build \uff15\uff18\uff10.95.05 4593.2.4",  # full-width digits
        "status\x1b[2J",
    ],
)
def test_injection_attempts_are_refused_without_echo(text: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_command(text)
    # One fixed message, whatever was sent: nothing of the input comes back.
    assert str(caught.value) == CHARSET_MESSAGE


def test_the_documented_injection_example_fails_on_its_characters() -> None:
    with pytest.raises(CommandError, match="may only hold letters, digits"):
        parse_command("build 580.1; rm -rf / 4593.2.5")


def test_length_limit() -> None:
    padding = " " * (MAX_TEXT_LENGTH - len("status"))
    assert parse_command("status" + padding) == Command(Verb.STATUS)
    with pytest.raises(CommandError, match="too long"):
        parse_command("status" + padding + " ")
    with pytest.raises(CommandError, match="too long"):
        parse_command("build " + "1" * 10_000)


def test_a_long_bad_word_is_shown_shortened() -> None:
    with pytest.raises(CommandError) as caught:
        parse_command("x" * 100)
    assert "x" * 40 + "…" in str(caught.value)
    assert "x" * 41 not in str(caught.value)
