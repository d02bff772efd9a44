"""A real cosign accepts what a real ``releasebot run`` signs, across a key rotation.

Real: ``releasebot run`` as a process (SQLite, feeds over HTTP, the real registry on
loopback, the fake Kubernetes API; the test plays Kaniko), the keys made by cosign 2.5's
``generate-key-pair`` (``tests.support.cosign``) and mounted as files the way the signing
component mounts the Secret, and cosign 2.5 checking the result from the registry:
``cosign verify`` (the ``sha256-<hex>.sig`` signature; keyed, no transparency log) and
``cosign verify-attestation --type cyclonedx`` and ``--type slsaprovenance1``.

Builds are released one at a time (``max_concurrent_builds = 1``). The first is signed by
the first pair. Then the Secret is rotated the slow way, file by file, while the process
runs: with only the new private key in place the second build is still signed by the old
pair (cosign accepts it with the old ``cosign.pub``; no publish fails); once the password
and public key follow, the third is signed by the new pair, and the old ``cosign.pub`` no
longer verifies it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.builds import KanikoPlayer
from tests.support.cosign import Cosign, find_cosign
from tests.support.feedserver import FeedServer
from tests.support.kubeapi import FakeKubeApi
from tests.support.registryserver import RunningRegistry
from tests.support.runprocess import ReleasebotProcess, free_port, wait_for, write_config

FIRST_PASSWORD, SECOND_PASSWORD = "first pair pw", "second pair pw"


@pytest.fixture
def cosign(tmp_path: Path) -> Cosign:
    return find_cosign(tmp_path / "cosign-work")


def _mount(cosign: Cosign, directory: Path, password: str) -> dict[str, bytes]:
    """A pair made by cosign, as the three files of the Secret."""
    key, public = cosign.generate_key_pair(directory, password)
    return {
        "cosign.key": key.read_bytes(),
        "cosign.password": password.encode(),
        "cosign.pub": public.read_bytes(),
    }


@pytest.mark.timeout(240)
def test_cosign_verifies_every_publish_of_a_running_bot_across_a_rotation(
    tmp_path: Path,
    cosign: Cosign,
    served_feeds: FeedServer,
    plain_registry: RunningRegistry,
    registry_name: str,
    kube_api: FakeKubeApi,
) -> None:
    first = _mount(cosign, tmp_path / "first", FIRST_PASSWORD)
    second = _mount(cosign, tmp_path / "second", SECOND_PASSWORD)
    (tmp_path / "first.pub").write_bytes(first["cosign.pub"])
    (tmp_path / "second.pub").write_bytes(second["cosign.pub"])
    mounted = tmp_path / "signing"
    mounted.mkdir()
    for name, body in first.items():
        (mounted / name).write_bytes(body)

    port = free_port()
    repository = plain_registry.repository(registry_name)
    config = write_config(
        tmp_path / "releasebot.toml",
        database_url=f"sqlite:///{tmp_path / 'state.db'}",
        flatcar_url=served_feeds.url("/releases-{channel}.json"),
        nvidia_url=served_feeds.url("/nvidia.json"),
        repository=repository,
        kubeconfig=kube_api.write_kubeconfig(tmp_path / "kubeconfig"),
        namespace=kube_api.namespace,
        port=port,
        keep=3,
    )
    env = {
        "RELEASEBOT_RUN_IDENTITY": "replica-a",
        "RELEASEBOT_BUILD_MAX_CONCURRENT_BUILDS": "1",
        "RELEASEBOT_SIGNING_KEY_FILE": str(mounted / "cosign.key"),
        "RELEASEBOT_SIGNING_PASSWORD_FILE": str(mounted / "cosign.password"),
        "RELEASEBOT_SIGNING_PUBLIC_KEY_FILE": str(mounted / "cosign.pub"),
    }
    player = KanikoPlayer(kube_api, plain_registry)
    published: list[str] = []

    def publish_next() -> str:
        """Play the next Job and wait until the bot calls its tag published."""
        done = set(published)

        def next_job() -> str | None:
            for job in player.job_names():
                if player.destination(job)[1] not in done:
                    return job
            return None

        job = wait_for(next_job, timeout=60, what="the next build Job")
        tag = player.destination(job)[1]
        player.build(job)
        wait_for(
            lambda: bot.metric("releasebot_targets", state="published") == len(done) + 1,
            timeout=60,
            what=f"{tag} to be published",
        )
        published.append(tag)
        return tag

    def accepted(tag: str, public: Path) -> list[str]:
        """What cosign refused of the tag's signature, SBOM and provenance (empty: all ok)."""
        reference = f"{repository}:{tag}"
        checks = {
            "verify": cosign.verify(reference, public),
            "cyclonedx": cosign.verify_attestation(reference, public, "cyclonedx"),
            "slsaprovenance1": cosign.verify_attestation(reference, public, "slsaprovenance1"),
        }
        return [f"{name}: {done.stderr[-600:]}" for name, done in checks.items() if done.returncode]

    with ReleasebotProcess(
        ["run", "--config", str(config)], tmp_path / "run.log", port=port, env=env
    ) as bot:
        bot.wait_serving()
        tag_one = publish_next()
        assert accepted(tag_one, tmp_path / "first.pub") == []

        # The rotation, one file at a time; the bot keeps cycling every second meanwhile.
        (mounted / "cosign.key").write_bytes(second["cosign.key"])
        tag_two = publish_next()
        assert accepted(tag_two, tmp_path / "first.pub") == []

        (mounted / "cosign.password").write_bytes(second["cosign.password"])
        (mounted / "cosign.pub").write_bytes(second["cosign.pub"])
        tag_three = publish_next()
        assert accepted(tag_three, tmp_path / "second.pub") == []
        refused = cosign.verify(f"{repository}:{tag_three}", tmp_path / "first.pub")
        assert refused.returncode != 0
        assert bot.metric("releasebot_targets", state="failed") in (None, 0)
        assert bot.terminate(timeout=20) == 0
        output = bot.output()

    lines = [json.loads(line) for line in output.splitlines()]
    messages = [line["message"] for line in lines]
    assert not [m for m in messages if "does not belong" in m], messages
    assert any(m.startswith("signing key rotated: ") for m in messages), messages
    for secret in (FIRST_PASSWORD, SECOND_PASSWORD):
        assert secret not in output
