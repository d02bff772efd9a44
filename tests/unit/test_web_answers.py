"""``AnswerCache``: answers kept by name within both bounds (count and bytes, the least
recently used dropped first; one bigger than the budget handed out, not kept), trusted for
``recheck_after`` and not a moment longer, and one builder per name at a time while the
others wait, a bounded time (and the per-name locks go away with their last user)."""

from __future__ import annotations

import threading

from releasebot.web.answers import AnswerCache, Built


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _built(value: str, size: int, at: float = 50.0, key: tuple[int, ...] = (1,)) -> Built[str]:
    return Built(value, size, key, None, at)


def test_both_bounds_hold_and_the_least_recently_used_goes_first() -> None:
    cache: AnswerCache[str] = AnswerCache(
        max_entries=3, max_bytes=100, recheck_after=60, monotonic=Clock()
    )
    for name in "abc":
        cache.put(name, _built(name, 10))
    assert cache.get("a") is not None  # "a" used: "b" is now the oldest
    cache.put("d", _built("d", 10))
    assert cache.get("b") is None
    assert [cache.get(n) is not None for n in "acd"] == [True, True, True]
    cache.put("e", _built("e", 85))  # bytes: 10 + 10 + 85 > 100, the oldest two go
    assert cache.size == (2, 95)
    assert cache.get("a") is None
    assert cache.get("c") is None
    cache.put("huge", _built("huge", 101))  # bigger than the budget: not kept
    assert cache.get("huge") is None
    assert cache.size == (2, 95)
    cache.put("e", _built("e2", 5))  # replaced, not counted twice
    assert cache.size == (2, 15)


def test_an_answer_is_trusted_for_recheck_after_and_not_longer() -> None:
    clock = Clock()
    cache: AnswerCache[str] = AnswerCache(recheck_after=60, monotonic=clock)
    cache.put("a", _built("a", 1, at=clock.now))
    clock.now += 59.9
    kept = cache.get("a")
    assert kept is not None
    assert kept.value == "a"
    clock.now += 0.1
    assert cache.get("a") is None
    assert cache.size == (0, 0)  # dropped, its bytes with it


def test_one_builder_per_name_the_others_wait_and_the_locks_go() -> None:
    cache: AnswerCache[str] = AnswerCache(recheck_after=60)
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        with cache.building("a", 30) as building:
            assert building
            inside.set()
            assert release.wait(10)
            order.append("first")

    def second() -> None:
        with cache.building("a", 30) as building:
            order.append("second" if building else "gave up")

    def impatient() -> None:
        with cache.building("a", 0.05) as building:
            order.append("impatient gave up" if not building else "impatient")

    def other() -> None:
        with cache.building("b", 30):  # another name never waits for "a"
            order.append("other")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert inside.wait(10)
    threads += [threading.Thread(target=second), threading.Thread(target=other)]
    threads[1].start()
    threads[2].start()
    threads[2].join(timeout=10)
    waiting = threading.Thread(target=impatient)
    waiting.start()
    waiting.join(timeout=10)
    assert order == ["other", "impatient gave up"]  # "second" still waits for "first"
    release.set()
    for thread in threads:
        thread.join(timeout=10)
    assert order == ["other", "impatient gave up", "first", "second"]
    assert cache._builders == {}  # no lock left behind per name asked
