"""The edge's bounded readers, value parsers, redirect policy and control stripping, alone.

Their behaviour at each limit (one under: accepted; one over: refused with one line), the
inputs Python's own tools get wrong (``²``, Arabic-Indic digits, ``1_0``, ``NaN``, IPv6), and
the redirect rules with an injected resolver (a public origin cannot be played on loopback).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from releasebot.builders.kaniko import trim_log_tail
from releasebot.domain.shared.untrusted import clean, strip_controls
from releasebot.edge.json import JsonLimits, JsonRefusedError, decode_json
from releasebot.edge.parse import (
    ValueRefusedError,
    check_path,
    parse_content_length,
    parse_decimal,
    parse_host_name,
    parse_int,
    parse_listen_address,
    parse_url,
    read_regular_file,
    read_secret_file,
)
from releasebot.edge.redirects import MAX_REDIRECTS, RedirectPolicy, RedirectRefusedError
from releasebot.edge.retry import parse_retry_after
from releasebot.edge.text import one_line
from tests.support.tools import missing_tool

# -- the bounded JSON reader ---------------------------------------------------------------


def test_depth_at_the_limit_is_read_and_one_more_is_refused() -> None:
    limits = JsonLimits(max_depth=8)
    assert decode_json(b"[" * 8 + b"]" * 8, limits) == [[[[[[[[]]]]]]]]
    with pytest.raises(JsonRefusedError, match="nested too deeply"):
        decode_json(b"[" * 9 + b"]" * 9, limits)
    with pytest.raises(JsonRefusedError, match="nested too deeply"):
        decode_json(b'{"a":' * 9 + b"1" + b"}" * 9, limits)


def test_brackets_and_escaped_quotes_inside_strings_do_not_count() -> None:
    body = b'{"a": "[[[[[[[[[[\\"]]]]{{{{", "b": ["\\\\", "]"]}'
    assert decode_json(body, JsonLimits(max_depth=2)) == {
        "a": '[[[[[[[[[["]]]]{{{{',
        "b": ["\\", "]"],
    }


def test_integer_digits_at_the_limit_and_over() -> None:
    limits = JsonLimits(max_digits=5)
    assert decode_json(b"[12345, -12345, 1.5e300]", limits) == [12345, -12345, 1.5e300]
    with pytest.raises(JsonRefusedError, match="integer of 6 digits"):
        decode_json(b"[123456]", limits)
    with pytest.raises(JsonRefusedError, match="integer of 5000 digits"):
        decode_json(b"[" + b"1" * 5000 + b"]")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"", "empty body"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[NaN]", "NaN is not JSON"),
        (b"[Infinity]", "Infinity is not JSON"),
        (b'{"a": 1', "truncated or invalid JSON at line 1 column 8"),
        (b"[1] [2]", "invalid JSON"),
    ],
)
def test_every_refusal_is_one_line(body: bytes, problem: str) -> None:
    with pytest.raises(JsonRefusedError, match=problem) as caught:
        decode_json(body)
    assert "\n" not in caught.value.problem


def test_size_is_checked_before_anything_is_decoded() -> None:
    with pytest.raises(JsonRefusedError, match="body of 11 bytes is over the limit of 10"):
        decode_json(b"[" + b"1," * 4 + b"1]", JsonLimits(max_bytes=10))


def test_a_byte_order_mark_is_harmless() -> None:
    assert decode_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="at most 500"):
        JsonLimits(max_depth=10_000)
    with pytest.raises(ValueError, match="positive"):
        JsonLimits(max_bytes=0)


# -- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["²", "١٢", "\uff11\uff12", "1_0", " 1", "+1", "-1", "0x1", "", "1e3"]
)
def test_only_ascii_digits_are_a_decimal(text: str) -> None:
    assert parse_decimal(text) is None


def test_decimal_digits_are_bounded() -> None:
    assert parse_decimal("9" * 18) == 10**18 - 1
    assert parse_decimal("9" * 19) is None


def test_parse_int_names_what_and_the_bounds() -> None:
    assert parse_int(" 42 ", "keep", maximum=100) == 42
    assert parse_int("-3", "offset", minimum=-5) == -3
    with pytest.raises(ValueRefusedError, match="keep must be between 0 and 100, got 101"):
        parse_int("101", "keep", maximum=100)
    with pytest.raises(
        ValueRefusedError, match=r"keep must be a whole number of ASCII digits, got '\\xb2'"
    ):
        parse_int("²", "keep")


def test_content_length() -> None:
    assert parse_content_length(None) is None
    assert parse_content_length("0") == 0
    assert parse_content_length(" 12 ") == 12
    assert parse_content_length("9" * 50) == 10**18  # over every limit, never converted
    for bad in ("²", "-1", "1, 1", "", "0x10"):
        with pytest.raises(ValueRefusedError, match="Content-Length is not a number"):
            parse_content_length(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:8080", ("::1", 8080)),
        ("[::]:65535", ("::", 65535)),
    ],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize(
    "text",
    ["0.0.0.0:²", "h:65536", ":80", "::1:80", "[::1:80", "[host]:80", "h:80\n", "h", "a b:1"],
)
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueRefusedError, match="must be HOST:PORT"):
        parse_listen_address(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost", "localhost"),
        ("LocalHost.:8080", "localhost"),
        ("Releasebot.Acme.Example.", "releasebot.acme.example"),
        ("10.2.3.4:8080", "10.2.3.4"),
        ("[::1]:8080", "::1"),
        ("[0:0::1]", "::1"),
        ("_svc.example", "_svc.example"),
    ],
)
def test_host_names_are_made_canonical(text: str, expected: str) -> None:
    assert parse_host_name(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a,b",
        "a, b",
        "a b",
        "::1",
        "[::1",
        "[::1]x",
        "[fe80::1%eth0]",
        "h:",
        "h:0",
        "h:65536",
        "h:8²",
        "u@h",
        "h/x",
        "a..b",
        ".a",
        "-a.b",
        "a-.b",
        "\u00e9.example",
        "h\n",
        "a" * 64 + ".example",
        "a." * 130,
    ],
)
def test_bad_host_names(text: str) -> None:
    with pytest.raises(ValueRefusedError, match="not a host name"):
        parse_host_name(text)


def test_host_names_without_a_port() -> None:
    assert parse_host_name("::1", port=False) == "::1"
    with pytest.raises(ValueRefusedError):
        parse_host_name("h.example:443", port=False)


def test_urls() -> None:
    assert parse_url("http://[::1]:8080/x").hostname == "::1"
    assert parse_url("https://h.example/x?y=1").port is None
    assert parse_url("sqlite:////tmp/my dir/é.db", schemes=("sqlite",), any_path=True)
    for bad, problem in [
        ("http://[::1/x", "not a valid URL"),
        ("http://h:²/x", "non-ASCII"),
        ("http://h:99999/", "port"),
        ("http:///x", "no host"),
        ("ftp://h/", "must be a http:// or https:// URL"),
        ("http://::1:80/", "IPv6 needs"),
        ("http://[fe80::1]x/", "after its IPv6 host"),
        ("http://h/\x00", "control"),
    ]:
        with pytest.raises(ValueRefusedError, match=problem):
            parse_url(bad)


def test_paths() -> None:
    assert check_path("/etc/releasebot.toml") == "/etc/releasebot.toml"
    with pytest.raises(ValueRefusedError, match="NUL byte"):
        check_path("/etc/x\x00")
    with pytest.raises(ValueRefusedError, match="longer than"):
        check_path("/" + "a" * 5000)


def test_regular_files_only_and_bounded(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"12345")
    assert read_regular_file(small, 5) == b"12345"
    with pytest.raises(ValueRefusedError, match="larger than 4 bytes"):
        read_regular_file(small, 4)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueRefusedError, match="is a FIFO, not a regular file"):
        read_regular_file(fifo, 10)  # opened non-blocking: no writer needed to refuse it
    with pytest.raises(ValueRefusedError, match="is a directory"):
        read_regular_file(tmp_path, 10)
    with pytest.raises(ValueRefusedError, match="is a character device"):
        read_regular_file("/dev/zero", 10)
    with pytest.raises(ValueRefusedError, match="not found"):
        read_regular_file(tmp_path / "missing", 10)


def test_an_unreadable_file_says_permission_denied(tmp_path: Path) -> None:
    """As root (CI) the mode is no obstacle: the read runs as ``nobody`` through setpriv."""
    secret = tmp_path / "cosign.key"
    secret.write_bytes(b"key")
    secret.chmod(0)
    probe = (
        "import sys\n"
        "from releasebot.edge.parse import ValueRefusedError, read_regular_file\n"
        "try:\n"
        f"    read_regular_file({str(secret)!r}, 10)\n"
        "except ValueRefusedError as error:\n"
        "    print(error)\n"
    )
    argv = [sys.executable, "-c", probe]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            missing_tool("setpriv (util-linux) runs the read as nobody")
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", *argv]
    root = str(Path(__file__).resolve().parents[2])
    shown = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert shown.stdout.strip() == (
        f"cannot open {secret}: permission denied (check the file's owner and mode, or the "
        "Secret's defaultMode)"
    ), shown.stderr


def test_secret_files(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_bytes(b"  xoxb-1\n")
    assert read_secret_file(token) == "xoxb-1"
    token.write_bytes(b"xoxb-\xe9")
    with pytest.raises(ValueRefusedError, match="not UTF-8 text") as caught:
        read_secret_file(token)
    assert "xoxb" not in str(caught.value)  # the content is never quoted


@pytest.mark.parametrize("value", ["²", "١٢", "1_0", "-1", "1.5"])
def test_retry_after_ignores_what_is_not_ascii_digits(value: str) -> None:
    assert parse_retry_after(value) is None


# -- redirects -----------------------------------------------------------------------------


def resolver(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    return lambda host: table.get(host, [])


def test_https_to_http_is_refused_and_http_to_https_followed() -> None:
    policy = RedirectPolicy("https://feeds.example/x", resolve=resolver({}))
    assert policy.follow("http://a.example/", "https://b.example/f") == "https://b.example/f"
    with pytest.raises(RedirectRefusedError, match="from https to plain http"):
        policy.follow("https://feeds.example/x", "http://feeds.example/x")


@pytest.mark.parametrize(
    ("location", "kind"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://localhost:8080/", "loopback"),
        ("http://api.localhost/", "loopback"),
        ("http://169.254.169.254/", "link-local"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://10.1.1.1/", "private"),
        ("http://100.64.0.1/", "private"),
        ("http://internal.example/", "private"),
        ("http://0.0.0.0/", "special-purpose"),
    ],
)
def test_a_public_origin_may_not_send_releasebot_inside(location: str, kind: str) -> None:
    table = {"feeds.example": ["93.184.216.34"], "internal.example": ["192.168.0.9"]}
    policy = RedirectPolicy("http://feeds.example/x", resolve=resolver(table))
    with pytest.raises(RedirectRefusedError, match=f"a {kind} address"):
        policy.follow("http://feeds.example/x", location)


def test_an_origin_inside_a_range_may_redirect_within_it_only() -> None:
    table = {"mirror.lan": ["192.168.0.5"], "cdn.lan": ["192.168.7.7"]}
    policy = RedirectPolicy("http://mirror.lan/x", resolve=resolver(table))
    assert policy.follow("http://mirror.lan/x", "http://cdn.lan/y") == "http://cdn.lan/y"
    assert policy.follow("http://cdn.lan/y", "https://93.184.216.34/z")  # public: fine
    with pytest.raises(RedirectRefusedError, match="a loopback address"):
        policy.follow("http://cdn.lan/y", "http://127.0.0.1/")


def test_relative_locations_hops_and_odd_locations() -> None:
    policy = RedirectPolicy("http://127.0.0.1/a", resolve=resolver({}))
    assert policy.follow("http://127.0.0.1/a/b", "../c") == "http://127.0.0.1/c"
    for _ in range(MAX_REDIRECTS - 1):
        policy.follow("http://127.0.0.1/a", "/a")
    with pytest.raises(RedirectRefusedError, match="too many redirects"):
        policy.follow("http://127.0.0.1/a", "/a")
    fresh = RedirectPolicy("http://127.0.0.1/", resolve=resolver({}))
    for location, problem in [
        (None, "without a Location"),
        ("http://", "without a host"),
        ("javascript:alert(1)", "non-http"),
        ("http://[::zz]/", "not a URL"),
    ]:
        with pytest.raises(RedirectRefusedError, match=problem):
            fresh.follow("http://127.0.0.1/", location)


# -- control characters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b[2J\x1b[Hwiped", "wiped"),
        ("\x1b]0;title\x07after", "after"),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x9b31mC1 CSI", "C1 CSI"),
        ("\x9d0;osc\x9cend", "end"),
        ("a\x00b\x7fc\x85d", "abc d"),  # NEL is a line break: a space
        ("left\u202eright\u2066", "leftright"),
        ("line\u2028sep", "line sep"),
        ("ünïcödé ✓", "ünïcödé ✓"),
    ],
)
def test_nothing_that_moves_a_terminal_survives(text: str, shown: str) -> None:
    assert one_line(text) == shown
    assert clean(text) == shown
    assert strip_controls(text).split() == shown.split()


def test_a_build_log_tail_keeps_its_lines_and_loses_its_escapes() -> None:
    log = "step 1\n\x1b[31merror:\x1b[0m make failed\r\n\x1b]0;title\x07done\n\n"
    assert trim_log_tail(log) == "step 1\nerror: make failed\ndone"
    assert trim_log_tail("\x1b[2J\n\n") is None
