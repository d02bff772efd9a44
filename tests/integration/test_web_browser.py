"""The coverage page in a real headless browser (Debian's chromium through chromedriver,
driven by Selenium) against a real server on a real SQLite store: the matrix shows the
seeded states in words and colour, the banner turns red when a node's image goes missing
(on the page's own refresh), names each missing or failed image with a link to its
detail and what to do, and counts only the nodes without their image; a refresh with
nothing changed redraws nothing (focus, selection and element identity stay) and one
with a change keeps the focus; the page's own timer asks with ETags, gets 304s and
rebuilds nothing while nothing changed, and shows a change in the store without a reload;
a cell opens the target's detail with its log tail scrolled
to its end and each attempt's start and duration; a tag found in the registry shows no
time to publish; the filter (state, search) narrows the matrix and lives in the address;
the driver row stays in sight when the matrix scrolls; times are local with UTC on hover;
hostile stored text stays text; and the page works at a phone's width."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from releasebot.domain.fleet.nodes import parse_node
from releasebot.domain.shared.versions import Arch
from releasebot.domain.targets.builds import job_name
from releasebot.domain.targets.models import TargetState
from releasebot.store.sql import SqlStateStore
from releasebot.wiring import open_store, utc_now
from tests.support.fleetnodes import gpu_node, ubuntu_gpu_node
from tests.support.overview import (
    BUILDING_TAG,
    COVERED_TAGS,
    FAILED_TAG,
    PageServer,
    planned_targets,
    seed_overview,
    set_state,
)
from tests.support.targets import make_target
from tests.support.tools import missing_tool

WAIT_SECONDS = 30  # generous: two loaded cores start chromium slowly


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing_tool(
            "chromium and chromedriver not installed (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(driver))
    browser.set_window_size(1280, 900)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStateStore]:
    with open_store(f"sqlite:///{tmp_path / 'releasebot.db'}") as store:
        seed_overview(store, utc_now())
        yield store


@pytest.fixture
def page(store: SqlStateStore, browser: webdriver.Chrome) -> Iterator[PageServer]:
    with PageServer(store) as server:
        browser.set_window_size(1280, 900)
        browser.get(server.url + "/")
        _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#matrix a.cell"))
        yield server


def _wait(browser: webdriver.Chrome, condition: object) -> object:
    return WebDriverWait(browser, WAIT_SECONDS).until(condition)


def _banner(browser: webdriver.Chrome) -> tuple[str, str]:
    banner = browser.find_element(By.ID, "banner")
    return banner.get_attribute("class") or "", banner.text


def test_the_matrix_shows_each_state_in_words_and_colour(
    page: PageServer, browser: webdriver.Chrome
) -> None:
    cells = {
        cell.get_attribute("data-tag"): cell
        for cell in browser.find_elements(By.CSS_SELECTOR, "#matrix a.cell")
    }
    assert set(cells) == {*COVERED_TAGS, FAILED_TAG, "570.195.03-flatcar4593.2.4"}
    failed = cells[FAILED_TAG]
    assert "failed" in failed.text
    assert "s-failed" in (failed.get_attribute("class") or "")
    published = cells[COVERED_TAGS[0]]
    assert "published" in published.text
    # published 3 hours ago, months after the release date in the feed
    assert re.search(r"after \d+ days", published.text), published.text
    colours = {tag: cell.value_of_css_property("background-color") for tag, cell in cells.items()}
    assert colours[FAILED_TAG] != colours[COVERED_TAGS[0]]
    assert "building" in cells["570.195.03-flatcar4593.2.4"].text
    row = browser.find_element(By.CSS_SELECTOR, 'th[data-version="4593.2.5"]')
    assert "stable" in row.text
    assert "2 running" in row.text
    assert _banner(browser) == (
        "banner covered",
        "✓ 2 GPU nodes on 1 Flatcar version: all covered",
    )


def test_the_banner_turns_red_when_a_node_loses_its_image(
    page: PageServer, browser: webdriver.Chrome, store: SqlStateStore
) -> None:
    set_state(store, COVERED_TAGS[0], TargetState.MISSING)
    browser.execute_script("refresh()")  # what the page's timer calls every 15 s
    _wait(browser, lambda b: "uncovered" in _banner(b)[0])
    _classes, text = _banner(browser)
    assert text.startswith("✗ 2 of 2 GPU nodes not covered (on 1 Flatcar version)")
    assert "2 nodes run Flatcar 4593.2.5 without its image since" in text
    assert "gpu-a, gpu-b" in text
    assert browser.find_element(By.ID, "banner").value_of_css_property("color") != (
        browser.find_element(By.TAG_NAME, "body").value_of_css_property("color")
    )
    set_state(store, COVERED_TAGS[0], TargetState.PUBLISHED)
    browser.execute_script("refresh()")
    _wait(browser, lambda b: _banner(b)[0] == "banner covered")


SIZES = {"desktop": (1280, 900), "phone": (390, 844)}


def _refresh(browser: webdriver.Chrome) -> None:
    """One run of the page's own refresh (what its timer calls every 15 s), to its end."""
    browser.execute_async_script("refresh().then(arguments[arguments.length - 1])")


@pytest.mark.parametrize("size", SIZES)
def test_the_banner_names_each_missing_image_and_what_to_do(
    page: PageServer, browser: webdriver.Chrome, store: SqlStateStore, size: str
) -> None:
    browser.set_window_size(*SIZES[size])
    # the channel policy's other driver failing is no node's image: still covered
    set_state(store, COVERED_TAGS[1], TargetState.FAILED)
    _refresh(browser)
    assert _banner(browser)[0] == "banner covered"
    # a third node, on 4593.2.4, whose own image (580.178.04) failed
    nodes = [gpu_node(name, "4593.2.5") for name in ("gpu-a", "gpu-b")]
    nodes += [gpu_node("gpu-c", "4593.2.4"), ubuntu_gpu_node("gpu-u")]
    store.record_fleet([parse_node(node) for node in nodes], utc_now() + timedelta(seconds=1))
    _refresh(browser)
    _wait(browser, lambda b: "uncovered" in _banner(b)[0])
    banner = browser.find_element(By.ID, "banner")
    assert banner.text.startswith("✗ 1 of 3 GPU nodes not covered (on 2 Flatcar versions)")
    assert "1 node runs Flatcar 4593.2.4 without its image since" in banner.text
    assert COVERED_TAGS[1] not in banner.text  # the policy's failure is not the nodes'
    [link] = banner.find_elements(By.CSS_SELECTOR, "ul.tags a")
    assert link.text == FAILED_TAG
    command = banner.find_element(By.CSS_SELECTOR, "ul.tags code").text
    assert command == f"/releasebot retry {FAILED_TAG}"
    assert "GPU nodes without a driver image" in banner.text
    assert browser.execute_script("return document.documentElement.scrollWidth") <= (
        browser.execute_script("return document.documentElement.clientWidth")
    )
    link.click()
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#detail:not([hidden]) pre.log"))
    assert browser.find_element(By.ID, "detail-title").text == FAILED_TAG


def test_a_refresh_with_nothing_changed_redraws_nothing(
    page: PageServer, browser: webdriver.Chrome, store: SqlStateStore
) -> None:
    browser.get(page.url + "/#/target/" + FAILED_TAG)
    log = _wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "#detail:not([hidden]) pre.log"))
    assert isinstance(log, WebElement)
    cell = browser.find_element(By.CSS_SELECTOR, f'#matrix a.cell[data-tag="{BUILDING_TAG}"]')
    banner = browser.find_element(By.CSS_SELECTOR, "#banner")
    feed = browser.find_element(By.CSS_SELECTOR, 'tr[data-feed="nvidia"]')
    browser.execute_script("arguments[0].focus()", cell)
    select = (
        "const range = document.createRange(); range.selectNodeContents(arguments[0]);"
        "getSelection().removeAllRanges(); getSelection().addRange(range);"
    )
    browser.execute_script(select, log)
    selected = browser.execute_script("return getSelection().toString()")
    assert "Error 2" in selected
    _refresh(browser)
    _refresh(browser)
    # the same elements, still in the page; focus and selection untouched
    for element in (log, cell, feed):
        assert element.is_displayed()  # a redrawn element would be stale and raise
    assert browser.switch_to.active_element == cell
    assert browser.execute_script("return getSelection().toString()") == selected
    assert banner.text
    # a change elsewhere (a feed) redraws that part only
    store.record_feed_failure("nvidia", "https://example.test/nvidia.json", "new error", utc_now())
    _refresh(browser)
    assert "new error" in browser.find_element(By.CSS_SELECTOR, 'tr[data-feed="nvidia"]').text
    assert cell.is_displayed()
    assert log.is_displayed()
    assert browser.switch_to.active_element == cell
    assert browser.execute_script("return getSelection().toString()") == selected
    # a change in the matrix redraws it, and the focused cell is focused again
    set_state(store, COVERED_TAGS[1], TargetState.MISSING)
    _refresh(browser)
    focused = browser.switch_to.active_element
    assert focused.get_attribute("data-tag") == BUILDING_TAG
    assert focused != cell  # drawn again...
    assert log.is_displayed()  # ...but not the detail, whose target did not change


TIMER_SECONDS = 45  # the page's own timer asks every 15 s; two loaded cores are slow


def _asked_since(browser: webdriver.Chrome, mark: float) -> dict[str, list[int]]:
    """The statuses of the API requests the page made since ``mark`` (performance.now())."""
    script = (
        "return performance.getEntriesByType('resource')"
        ".filter((e) => e.startTime > arguments[0] && e.name.includes('/api/'))"
        ".map((e) => [new URL(e.name).pathname, e.responseStatus]);"
    )
    asked: dict[str, list[int]] = {}
    for path, status in browser.execute_script(script, mark):
        asked.setdefault(path, []).append(status)
    return asked


def test_the_pages_own_timer_gets_304s_rebuilds_nothing_and_shows_a_change(
    page: PageServer, browser: webdriver.Chrome, store: SqlStateStore
) -> None:
    """No ``refresh()`` called by the test: the page's timer does it all."""
    cell = browser.find_element(By.CSS_SELECTOR, f'#matrix a.cell[data-tag="{BUILDING_TAG}"]')
    node = browser.find_element(By.CSS_SELECTOR, 'tr[data-node="gpu-a"]')
    feed = browser.find_element(By.CSS_SELECTOR, 'tr[data-feed="nvidia"]')
    # every change of the parts' structure counted; a "3 min ago" kept current is not one
    browser.execute_script(
        "window.rebuilt = 0; const seen = new MutationObserver((records) => {"
        "  for (const r of records) if (!r.target.closest('time, [data-since]')) rebuilt += 1; });"
        "for (const id of ['banner', 'matrix', 'nodes', 'feeds'])"
        "  seen.observe(document.getElementById(id), { childList: true, subtree: true });"
    )
    mark = browser.execute_script("return performance.now()")
    paths = {"/api/fleet", "/api/targets", "/api/feeds"}
    _wait_timer(browser, lambda b: paths <= set(_asked_since(b, mark)))
    asked = _asked_since(browser, mark)
    assert all(set(asked[path]) == {304} for path in paths), asked
    assert browser.execute_script("return rebuilt") == 0
    for element in (cell, node, feed):
        assert element.is_displayed()  # the same elements: a redrawn one would be stale
    # a change in the store: shown by the next tick, without a reload
    mark = browser.execute_script("return performance.now()")
    set_state(store, COVERED_TAGS[0], TargetState.MISSING)
    _wait_timer(browser, lambda b: "uncovered" in _banner(b)[0])
    asked = _asked_since(browser, mark)
    assert 200 in asked["/api/targets"], asked
    assert 200 in asked["/api/fleet"], asked
    assert set(asked["/api/feeds"]) == {304}, asked  # the feeds did not change
    assert feed.is_displayed()  # so their table was not drawn again
    assert browser.execute_script("return rebuilt") > 0


def _wait_timer(browser: webdriver.Chrome, condition: object) -> object:
    return WebDriverWait(browser, TIMER_SECONDS, poll_frequency=0.5).until(condition)


def _long_log(store: SqlStateStore) -> str:
    [build] = store.builds(tag=FAILED_TAG)
    lines = [f"  CC [M]  nvidia/file{index}.o" for index in range(200)]
    log = "\n".join([*lines, "error: the modules do not build (the line that matters)"])
    now = utc_now()
    store.save(
        builds=[
            replace(build, log_tail=log, created_at=now - timedelta(minutes=25), finished_at=now)
        ]
    )
    return log


@pytest.mark.parametrize("size", SIZES)
def test_the_log_tail_opens_at_its_end_and_attempts_say_when(
    page: PageServer, browser: webdriver.Chrome, store: SqlStateStore, size: str
) -> None:
    _long_log(store)
    browser.set_window_size(*SIZES[size])
    browser.get(page.url + "/#/target/" + FAILED_TAG)
    log = _wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "#detail:not([hidden]) pre.log"))
    assert isinstance(log, WebElement)
    top, client, height = browser.execute_script(
        "const l = arguments[0]; return [l.scrollTop, l.clientHeight, l.scrollHeight]", log
    )
    assert height > client  # it does scroll...
    assert top + client >= height - 2  # ...and shows its end: the error
    heading = browser.find_element(By.CSS_SELECTOR, ".attempt h3")
    assert re.search(r"Attempt 1 · started .+, took 25 min", heading.text), heading.text
    started = heading.find_element(By.TAG_NAME, "time")
    assert (started.get_attribute("title") or "").endswith(" UTC")


def test_a_tag_found_in_the_registry_shows_no_time_to_publish(
    page: PageServer, browser: webdriver.Chrome, store: SqlStateStore
) -> None:
    now = utc_now()
    found = make_target(driver="575.64.05", flatcar="4593.2.5")
    records = {r.tag: r for r in store.sync_targets(planned_targets(found), now)}
    store.save(targets=[replace(records[found.tag], state=TargetState.PUBLISHED, published_at=now)])
    browser.get(page.url + "/")
    cell = _wait(
        browser, lambda b: b.find_element(By.CSS_SELECTOR, f'a.cell[data-tag="{found.tag}"]')
    )
    assert isinstance(cell, WebElement)
    assert cell.text == "✓ published"  # no "after 146 days"
    assert "already in the registry when first seen" in (cell.get_attribute("title") or "")
    built = browser.find_element(By.CSS_SELECTOR, f'a.cell[data-tag="{COVERED_TAGS[0]}"]')
    assert "after" in built.text
    cell.click()
    _wait(browser, lambda b: b.find_element(By.ID, "detail-title").text == found.tag)
    assert "already in the registry when first seen" in browser.find_element(By.ID, "detail").text


def _shown_tags(browser: webdriver.Chrome) -> set[str]:
    """The matrix's cells, read in one go (the page may be redrawing it meanwhile)."""
    tags: list[str] = browser.execute_script(
        "return Array.from(document.querySelectorAll('#matrix a.cell'), (c) => c.dataset.tag)"
    )
    return set(tags)


@pytest.mark.parametrize("size", SIZES)
def test_the_filter_narrows_the_matrix_and_lives_in_the_address(
    page: PageServer, browser: webdriver.Chrome, size: str
) -> None:
    browser.set_window_size(*SIZES[size])
    everything = {*COVERED_TAGS, FAILED_TAG, BUILDING_TAG}
    assert _shown_tags(browser) == everything
    Select(browser.find_element(By.ID, "filter-state")).select_by_value("failed")
    _wait(browser, lambda b: _shown_tags(b) == {FAILED_TAG})
    assert browser.current_url.endswith("/?state=failed")
    search = browser.find_element(By.ID, "filter-q")
    search.send_keys("570")
    _wait(browser, lambda b: "q=570" in b.current_url)
    _wait(browser, lambda b: b.find_element(By.ID, "matrix").text == "Nothing matches the filter.")
    Select(browser.find_element(By.ID, "filter-state")).select_by_value("")
    _wait(browser, lambda b: _shown_tags(b) == {COVERED_TAGS[1], BUILDING_TAG})
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#matrix thead th")]
    assert headers == ["Flatcar", "570.195.03"]  # the other driver's column is gone
    # a link keeps the filter: open it afresh
    browser.get(page.url + "/?q=4593.2.4")
    _wait(browser, lambda b: _shown_tags(b) == {FAILED_TAG, BUILDING_TAG})
    assert browser.find_element(By.ID, "filter-q").get_attribute("value") == "4593.2.4"
    assert "Showing 1 Flatcar version" in browser.find_element(By.ID, "counts").text
    browser.find_element(By.ID, "filter-clear").click()
    _wait(browser, lambda b: _shown_tags(b) == everything)
    assert browser.current_url == page.url + "/"
    # a bad state in a link is one line that says what to do, never a traceback
    browser.get(page.url + "/?state=" + quote("<b>bogus</b>"))
    problem = _wait(
        browser,
        lambda b: (
            b.find_element(By.ID, "problem").is_displayed() and b.find_element(By.ID, "problem")
        ),
    )
    assert isinstance(problem, WebElement)
    assert 'state "<b>bogus</b>" is not one of' in problem.text
    assert not problem.find_elements(By.TAG_NAME, "b")


def test_the_driver_row_stays_in_sight_when_the_matrix_scrolls(
    page: PageServer, browser: webdriver.Chrome, store: SqlStateStore
) -> None:
    many = [make_target(driver="580.178.04", flatcar=f"4000.0.{n}") for n in range(40)]
    store.sync_targets(planned_targets(*many), utc_now())
    browser.get(page.url + "/")
    _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#matrix tbody tr")) > 40)
    scroller = browser.find_element(By.CSS_SELECTOR, ".matrix-scroll")
    browser.execute_script("arguments[0].scrollTop = 600", scroller)
    header = browser.find_element(By.CSS_SELECTOR, "#matrix thead th.driver")
    box_top, header_top, header_bottom = browser.execute_script(
        "const s = arguments[0].getBoundingClientRect(), h = arguments[1].getBoundingClientRect();"
        "return [s.top, h.top, h.bottom]",
        scroller,
        header,
    )
    assert browser.execute_script("return arguments[0].scrollTop", scroller) > 0
    assert abs(header_top - box_top) <= 1.5  # stuck to the top of the scrolled matrix
    assert header_bottom > header_top
    # the row under it is really hidden behind it: the sticky header is drawn on top
    covered = browser.execute_script(
        "const h = arguments[0].getBoundingClientRect();"
        "return document.elementFromPoint(h.left + 5, h.top + h.height / 2).closest('th')",
        header,
    )
    assert covered == header


def test_times_are_local_with_utc_on_hover(page: PageServer, browser: webdriver.Chrome) -> None:
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    try:
        browser.get(page.url + "/#/target/" + COVERED_TAGS[0])
        _wait(browser, lambda b: b.find_element(By.ID, "detail-title").text == COVERED_TAGS[0])
        published: Any = browser.execute_script(
            "return fetch('/api/targets/' + arguments[0]).then((a) => a.json())"
            ".then((d) => d.published_at)",
            COVERED_TAGS[0],
        )
        shown = browser.find_element(By.CSS_SELECTOR, f'#detail time[datetime="{published}"]')
        from datetime import datetime

        at = datetime.fromisoformat(published)
        assert shown.get_attribute("title") == at.strftime("%Y-%m-%d %H:%M:%S UTC")
        local = at + timedelta(hours=5, minutes=30)  # Asia/Kolkata, no daylight saving
        assert f"{local.hour % 12 or 12}:{local.minute:02d}" in shown.text, shown.text
        for element in browser.find_elements(By.CSS_SELECTOR, "time"):
            assert (element.get_attribute("title") or "").endswith(" UTC")
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


def test_a_cell_opens_the_targets_detail(page: PageServer, browser: webdriver.Chrome) -> None:
    browser.find_element(By.CSS_SELECTOR, f'#matrix a.cell[data-tag="{FAILED_TAG}"]').click()
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#detail:not([hidden]) pre.log"))
    detail = browser.find_element(By.ID, "detail")
    assert FAILED_TAG in detail.find_element(By.ID, "detail-title").text
    assert "NonZeroExit" in detail.text
    job = detail.find_element(By.CSS_SELECTOR, ".job code").text
    assert job == job_name(FAILED_TAG, Arch.AMD64, 1)
    log = detail.find_element(By.CSS_SELECTOR, "pre.log").text
    assert "make: *** [modules] Error 2" in log
    assert "<script>alert(1)</script>" in log  # shown as text...
    assert not detail.find_elements(By.CSS_SELECTOR, "pre.log img, pre.log script")  # ...only
    assert browser.title != "owned"
    pull = detail.find_element(By.ID, "pull").text
    assert pull == f"registry.example.com/nvidia/driver:{FAILED_TAG}"
    assert detail.find_element(By.CSS_SELECTOR, ".pull button").text == "Copy"
    detail.find_element(By.ID, "detail-close").click()
    _wait(browser, lambda b: not b.find_element(By.ID, "detail").is_displayed())


def test_feed_errors_are_text(page: PageServer, browser: webdriver.Chrome) -> None:
    feed = browser.find_element(By.CSS_SELECTOR, 'tr[data-feed="nvidia"]')
    assert "onerror" in feed.text
    assert not feed.find_elements(By.TAG_NAME, "img")
    assert browser.title != "owned"


def test_it_works_at_a_phones_width(page: PageServer, browser: webdriver.Chrome) -> None:
    browser.set_window_size(390, 844)
    browser.get(page.url + "/#/target/" + FAILED_TAG)
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#detail:not([hidden]) pre.log"))
    width = browser.execute_script("return document.documentElement.clientWidth")
    scroll = browser.execute_script("return document.documentElement.scrollWidth")
    assert scroll <= width  # nothing but the matrix's own scroller is wider than the phone
    banner = browser.find_element(By.ID, "banner")
    assert banner.is_displayed()
    assert banner.size["width"] <= width
    matrix = browser.find_element(By.CSS_SELECTOR, ".scroll")
    assert matrix.size["width"] <= width
    version = browser.find_element(By.CSS_SELECTOR, 'th[data-version="4593.2.4"]')
    assert version.is_displayed()


def test_a_store_that_is_down_is_said_on_the_page(browser: webdriver.Chrome) -> None:
    from releasebot.store.engine import make_engine

    engine = make_engine("postgresql+psycopg://releasebot@127.0.0.1:9/none")
    try:
        with PageServer(SqlStateStore(engine)) as server:
            browser.set_window_size(1280, 900)
            browser.get(server.url + "/")
            problem = _wait(
                browser,
                lambda b: (
                    b.find_element(By.ID, "problem").is_displayed()
                    and b.find_element(By.ID, "problem")
                ),
            )
            assert "state store cannot be reached" in problem.text
            assert "Traceback" not in browser.page_source
    finally:
        engine.dispose()


def test_an_empty_store_is_neither_green_nor_red(browser: webdriver.Chrome, tmp_path: Path) -> None:
    with (
        open_store(f"sqlite:///{tmp_path / 'empty.db'}") as store,
        PageServer(store) as server,
    ):
        browser.set_window_size(1280, 900)
        browser.get(server.url + "/")
        _wait(browser, lambda b: "unknown" not in _banner(b)[0])
        assert _banner(browser) == ("banner none", "No GPU node seen yet")
        assert browser.find_element(By.ID, "matrix").text == "No target planned yet."
