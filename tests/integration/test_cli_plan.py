"""``releasebot plan`` and ``demo`` end to end: real HTTP feeds, a real SQLite store, the CLI.

Covers the output formats, progress lines and ``--quiet``, the exit codes, a feed that
fails while the others go on, the last good state surviving a broken feed, releases that
vanish from a feed, the replay of the two real stable snapshots, and bad configuration.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from releasebot.cli import main
from tests.support.feedserver import FeedServer, Reply
from tests.support.postgres import fresh_postgres_database
from tests.support.registryserver import RunningRegistry

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as feed_server:
        yield feed_server


@pytest.fixture
def repository(plain_registry: RunningRegistry, registry_name: str) -> str:
    """An empty repository in a real registry on loopback: every target starts missing."""
    return plain_registry.repository(registry_name)


def serve(server: FeedServer, path: str, file: Path, etag: str = '"v1"') -> None:
    server.route(path, FeedServer.static(file.read_bytes(), etag=etag))


def write_config(tmp_path: Path, server: FeedServer, repository: str, **extra: str) -> Path:
    lines = {
        "registry": f'repository = "{repository}"\ninsecure = true',
        "database": f'url = "sqlite:///{tmp_path / "state.db"}"',
        "flatcar": (
            f'feed_url = "{server.url("/flatcar/releases-{channel}.json")}"\n'
            'channels = ["stable", "lts-2024"]\narches = ["amd64", "arm64"]\nkeep = 2'
        ),
        "nvidia": f'feed_url = "{server.url("/nvidia/releases.json")}"\nbranches = ["580"]',
    }
    lines.update(extra)
    path = tmp_path / "releasebot.toml"
    path.write_text("".join(f"[{k}]\n{v}\n" for k, v in lines.items()), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def serve_fixtures(server: FeedServer, test_data: Path) -> None:
    serve(server, "/flatcar/releases-stable.json", test_data / "flatcar/releases-stable.json")
    serve(server, "/flatcar/releases-lts-2024.json", test_data / "flatcar/releases-lts-2024.json")
    serve(server, "/nvidia/releases.json", test_data / "nvidia/releases.json")


def test_plan_prints_json_targets(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    code, out, err = run(
        capsys,
        "plan",
        "--config",
        str(write_config(tmp_path, server, repository)),
        "--format",
        "json",
    )
    assert code == 0, err
    targets = json.loads(out)
    assert [t["tag"] for t in targets] == [
        "580.178.04-flatcar4593.2.5",
        "580.178.04-flatcar4593.2.4",
        "580.178.04-flatcar4081.3.10",
        "580.178.04-flatcar4081.3.9",
    ]
    first = targets[0]
    assert first["driver_version"] == "580.178.04"
    assert first["flatcar_version"] == "4593.2.5"
    assert first["flatcar_channel"] == "stable"
    assert first["kernel"] == "6.12.102"
    assert first["arches"] == ["amd64", "arm64"]
    assert first["reasons"] == ["channel"]
    assert first["state"] == "missing"  # the registry is empty
    assert targets[2]["flatcar_channel"] == "lts"
    # one progress line per feed on stderr
    assert err.count("releasebot: feed ") == 3
    assert "feed flatcar/stable: changed, 4 releases" in err


def test_known_incompatible_pairs_are_skipped_and_plan_says_why(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    nvidia = (
        f'feed_url = "{server.url("/nvidia/releases.json")}"\nbranches = ["580"]\n'
        'incompatible = ["580.*:6.12.95*", "535.*:6.12.102"]'
    )
    config = write_config(tmp_path, server, repository, nvidia=nvidia)
    code, out, err = run(capsys, "plan", "--config", str(config), "--format", "json")
    assert code == 0, err
    tags = [t["tag"] for t in json.loads(out)]
    assert "580.178.04-flatcar4593.2.4" not in tags  # kernel 6.12.95
    assert tags[0] == "580.178.04-flatcar4593.2.5"  # kernel 6.12.102: another driver's pair
    [line] = [line for line in err.splitlines() if "skipped" in line]
    assert line.endswith(
        "580.178.04-flatcar4593.2.4 skipped: NVIDIA 580.178.04 does not build for kernel"
        " 6.12.95 (nvidia.incompatible lists '580.*:6.12.95*')"
    )


def test_plan_table_and_quiet(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    code, out, err = run(
        capsys, "plan", "--quiet", "--config", str(write_config(tmp_path, server, repository))
    )
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    assert lines[0].split() == [
        "TAG",
        "DRIVER",
        "FLATCAR",
        "CHANNEL",
        "KERNEL",
        "ARCHES",
        "REASON",
        "STATE",
        "DIGEST",
    ]
    assert lines[1].split() == [
        "580.178.04-flatcar4593.2.5",
        "580.178.04",
        "4593.2.5",
        "stable",
        "6.12.102",
        "amd64,arm64",
        "channel",
        "missing",
    ]
    assert len(lines) == 5


def test_plan_shows_published_tags_with_their_digest(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    plain_registry: RunningRegistry,
    registry_name: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    digest = plain_registry.push_image(registry_name, "580.178.04-flatcar4593.2.5", arch="amd64")
    config = str(write_config(tmp_path, server, repository))
    code, out, err = run(capsys, "plan", "--config", config, "--format", "json")
    assert code == 0, err
    states = {t["tag"]: (t["state"], t["digest"]) for t in json.loads(out)}
    assert states["580.178.04-flatcar4593.2.5"] == ("published", digest)
    assert states["580.178.04-flatcar4593.2.4"] == ("missing", None)


def test_registry_down_keeps_last_known_states(
    tmp_path: Path,
    server: FeedServer,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    closed = "127.0.0.1:9/nvidia/driver"  # the discard port: nothing listens
    registry = f'repository = "{closed}"\ninsecure = true\nretries = 0'  # no backoff sleeps
    config = str(write_config(tmp_path, server, closed, registry=registry))
    code, out, err = run(capsys, "plan", "--config", config, "--format", "json")
    assert code == 1  # the plan is printed, but what exists could not be checked
    assert {t["state"] for t in json.loads(out)} == {"unknown"}
    assert "registry 127.0.0.1:9: unreachable" in err
    assert "Traceback" not in err


def test_repeat_run_sends_conditional_requests_and_gets_the_same_plan(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    config = str(write_config(tmp_path, server, repository))
    _, first, _ = run(capsys, "plan", "--config", config, "--format", "json")
    code, second, err = run(capsys, "plan", "--config", config, "--format", "json")
    assert code == 0
    assert json.loads(second) == json.loads(first)
    assert err.count(": unchanged (1 request") == 3
    repeat = server.requests[3:]
    assert len(repeat) == 3
    assert all(request.headers.get("if-none-match") == '"v1"' for request in repeat)


def test_a_failing_feed_is_one_line_and_the_others_still_plan(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    server.route("/flatcar/releases-lts-2024.json", Reply(404, {}, b"gone"))
    code, out, err = run(
        capsys,
        "plan",
        "--config",
        str(write_config(tmp_path, server, repository)),
        "--format",
        "json",
    )
    assert code == 0
    assert [t["flatcar_version"] for t in json.loads(out)] == ["4593.2.5", "4593.2.4"]
    errors = [line for line in err.splitlines() if "flatcar/lts-2024" in line]
    assert len(errors) == 1
    assert "404" in errors[0]
    assert "Traceback" not in err


def test_nothing_plannable_exits_1(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve(server, "/nvidia/releases.json", test_data / "nvidia/releases.json")
    server.route(
        "/flatcar/releases-stable.json",
        Reply(200, {"Content-Type": "text/html"}, b"<html>login</html>"),
    )
    server.route("/flatcar/releases-lts-2024.json", Reply(200, {}, b'{"4081.3.1": {"chan'))
    code, out, err = run(
        capsys, "plan", "--config", str(write_config(tmp_path, server, repository))
    )
    assert code == 1
    assert out == "no targets\n"
    assert "feed flatcar/stable: returned HTML" in err
    assert "feed flatcar/lts-2024: truncated or invalid JSON" in err
    assert "nothing could be planned" in err


def test_last_good_state_survives_a_broken_feed(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    config = str(write_config(tmp_path, server, repository))
    _, good, _ = run(capsys, "plan", "--config", config, "--format", "json")
    server.route("/flatcar/releases-stable.json", Reply(200, {}, b'{"4593.2.x": {}}'))
    server.route("/nvidia/releases.json", Reply(503, {}, b"down"))
    code, after, err = run(capsys, "plan", "--config", config, "--format", "json")
    assert code == 0
    assert json.loads(after) == json.loads(good)
    assert "feed flatcar/stable: key '4593.2.x' is not a version" in err
    assert "feed nvidia:" in err
    with sqlite3.connect(tmp_path / "state.db") as db:
        rows = dict(db.execute("select name, consecutive_failures from feeds"))
        etag = db.execute("select etag from feeds where name = 'flatcar/stable'").fetchone()[0]
    assert rows == {"flatcar/stable": 1, "flatcar/lts-2024": 0, "nvidia": 1}
    assert etag == '"v1"'


def test_vanished_release_stays_a_target_and_replaced_one_is_kept_unrequired(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    config = str(write_config(tmp_path, server, repository))
    run(capsys, "plan", "--config", config)
    stable = json.loads((test_data / "flatcar/releases-stable.json").read_text())
    del stable["4593.2.5"]
    server.route(
        "/flatcar/releases-stable.json", FeedServer.static(json.dumps(stable).encode(), etag='"v2"')
    )
    code, out, _ = run(capsys, "plan", "--config", config, "--format", "json")
    assert code == 0
    assert "580.178.04-flatcar4593.2.5" in [t["tag"] for t in json.loads(out)]
    with sqlite3.connect(tmp_path / "state.db") as db:
        present = db.execute(
            "select present from flatcar_feed_entries"
            " where feed = 'flatcar/stable' and version = '4593.2.5'"
        ).fetchone()
    assert present == (0,)


def test_replay_of_the_real_stable_snapshots(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    shared_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    flatcar = shared_data / "flatcar"
    serve(server, "/flatcar/releases-stable.json", flatcar / "releases-stable.2026-07-09.json")
    serve(server, "/nvidia/releases.json", shared_data / "nvidia/datacenter-releases.fixture.json")
    config = str(
        write_config(
            tmp_path,
            server,
            repository,
            flatcar=(
                f'feed_url = "{server.url("/flatcar/releases-{channel}.json")}"\n'
                'channels = ["stable"]\nkeep = 2'
            ),
        )
    )
    _, before, _ = run(capsys, "plan", "--config", config, "--format", "json")
    assert [t["tag"] for t in json.loads(before)] == [
        "580.178.04-flatcar4593.2.4",
        "580.178.04-flatcar4593.2.3",
    ]
    serve(
        server, "/flatcar/releases-stable.json", flatcar / "releases-stable.2026-08-13.json", '"v2"'
    )
    code, after, err = run(capsys, "plan", "--config", config, "--format", "json")
    assert code == 0
    targets = json.loads(after)
    assert [(t["tag"], t["kernel"]) for t in targets] == [
        ("580.178.04-flatcar4593.2.5", "6.12.102"),
        ("580.178.04-flatcar4593.2.4", "6.12.95"),
    ]
    assert "feed flatcar/stable: changed, 137 releases" in err
    with sqlite3.connect(tmp_path / "state.db") as db:
        required = dict(db.execute("select tag, required from targets"))
        releases = db.execute("select count(*) from flatcar_releases").fetchone()[0]
    assert required == {
        "580.178.04-flatcar4593.2.5": 1,
        "580.178.04-flatcar4593.2.4": 1,
        "580.178.04-flatcar4593.2.3": 0,
    }
    assert releases == 137


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[flatcar]\nchannels = ["edge"]\n', "config: flatcar.channels: 'edge' is not a channel"),
        ("[flatcar]\nkep = 1\n", "config: flatcar.kep: unknown key"),
        ('[nvidia]\nfeed_url = "gopher://x"\n', "config: nvidia.feed_url: must be an http://"),
    ],
)
def test_bad_config_is_one_line_exit_2(
    tmp_path: Path, toml: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml, encoding="utf-8")
    code, out, err = run(capsys, "plan", "--config", str(path))
    assert code == 2
    assert out == ""
    assert err.startswith(f"releasebot: {message}")
    assert err.count("\n") == 1


def test_demo_runs_offline_on_the_shipped_feeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "demo", "--dir", str(tmp_path), "--format", "json")
    assert code == 0, err
    shown = json.loads(out)
    reasons = {t["tag"]: t["reasons"] for t in shown["targets"]}
    # The simulated fleet: a node on beta about to reboot into the next beta (a channel
    # the demo does not configure: its feed is read for that node), a node a release
    # behind keep, and the channel policy's newest releases.
    assert list(reasons)[:2] == ["595.91.07-flatcar4757.1.0", "580.178.04-flatcar4757.1.0"]
    assert reasons["580.178.04-flatcar4757.1.0"] == ["pending-reboot"]
    assert reasons["580.178.04-flatcar4593.2.3"] == ["fleet"]
    assert reasons["580.178.04-flatcar4593.2.5"] == ["fleet", "channel"]
    assert reasons["580.178.04-flatcar4081.3.10"] == ["channel"]
    nodes = {node["name"]: node for node in shown["fleet"]["nodes"]}
    assert set(nodes) == {"gpu-a10g-0", "gpu-a10g-1", "gpu-gh200-2", "gpu-l40s-3"}
    assert {node["verdict"] for node in nodes.values()} == {"missing"}  # the registry is empty
    assert (nodes["gpu-l40s-3"]["pending_version"], nodes["gpu-l40s-3"]["before_reboot"]) == (
        "4757.1.0",
        True,
    )
    assert [node["name"] for node in shown["fleet"]["ignored"]] == ["gpu-ubuntu-5"]
    assert "feed flatcar/beta: changed, 2 releases" in err
    assert (tmp_path / "releasebot-demo.db").exists()


def test_demo_as_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "RELEASEBOT_DATABASE_URL": "sqlite:////nonexistent/ignored.db"}
    result = subprocess.run(
        [sys.executable, "-m", "releasebot", "demo"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "595.91.07-flatcar4593.2.5" in result.stdout
    assert "gpu-l40s-3   amd64  4722.1.0  missing  -      4757.1.0  missing" in result.stdout
    assert "Traceback" not in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "releasebot", "plan", "--config", str(tmp_path / "none.toml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"releasebot: config: --config: file {tmp_path / 'none.toml'} not found"
    )


@pytest.mark.postgres
def test_plan_on_postgresql(
    tmp_path: Path,
    server: FeedServer,
    repository: str,
    test_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_fixtures(server, test_data)
    with fresh_postgres_database() as url:
        database = f'url = "{url.render_as_string(hide_password=False)}"'
        config = str(write_config(tmp_path, server, repository, database=database))
        code, first, err = run(capsys, "plan", "--config", config, "--format", "json")
        assert code == 0, err
        code, second, err = run(capsys, "plan", "--config", config, "--format", "json")
        assert code == 0, err
    assert json.loads(second) == json.loads(first)
    assert len(json.loads(first)) == 4
    assert err.count(": unchanged (1 request") == 3
