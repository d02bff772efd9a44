"""The demo's simulated builds (``demo.history.seed_demo_builds``): every text a seeded build
carries (its log tail, its message) names only its own target's driver, Flatcar version,
kernel and tag, never another target's, whatever targets the demo planned."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from releasebot.demo.history import seed_demo_builds
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import BuildRecord
from releasebot.domain.targets.models import Target, TargetRecord
from releasebot.store.memory import MemoryStateStore
from tests.support.targets import make_target

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?![\w.])")
"""A three-part version: a driver (580.178.04), a Flatcar release (4593.2.5), a kernel."""

PLANS = {
    "one kernel per release": [
        make_target(driver=driver, flatcar=flatcar, kernel=kernel, arches=arches)
        for flatcar, kernel, arches in (
            ("4628.0.0", "6.12.110", (Arch.AMD64, Arch.ARM64)),
            ("4593.2.5", "6.12.102", (Arch.AMD64,)),
            ("4593.2.4", "6.12.97", (Arch.AMD64, Arch.ARM64)),
        )
        for driver in ("580.178.04", "570.195.03")
    ],
    "the demo's own shape": [
        make_target(driver=driver, flatcar=flatcar, kernel=f"6.6.{index}")
        for index, flatcar in enumerate(("4459.2.4", "4459.2.3", "4459.2.2"), start=90)
        for driver in ("595.58.03", "580.105.08")
    ],
}


def _texts(build: BuildRecord) -> list[str]:
    return [text for text in (build.log_tail, build.message) if text]


@pytest.mark.parametrize("plan", PLANS.values(), ids=list(PLANS))
def test_every_seeded_build_names_only_its_own_target(plan: list[Target]) -> None:
    store = MemoryStateStore()
    store.sync_targets(plan, NOW)
    changed = seed_demo_builds(store, NOW)
    assert len(changed) == len(plan) - 1  # the last one stays missing
    records: dict[str, TargetRecord] = {record.tag: record for record in store.targets()}
    other_tags = set(records)
    logs = 0
    for build in store.builds():
        target = records[build.tag].target
        own = {target.driver_version.text, target.flatcar_version.text, target.kernel}
        for text in _texts(build):
            assert set(VERSION.findall(text)) <= own, (build.tag, text)
            for tag in other_tags - {build.tag}:
                assert tag not in text, (build.tag, text)
        if build.log_tail and "build-modules" in build.log_tail:
            logs += 1
            for value in own:  # the failed build's log says what it built, in full
                assert value in build.log_tail, (value, build.log_tail)
            assert f"({build.arch.value})" in build.log_tail
    assert logs == len(records[changed[1]].target.arches)  # the failed target's, per arch
