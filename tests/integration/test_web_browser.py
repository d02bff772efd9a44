"""The coverage page in a real headless browser (Debian's chromium through chromedriver,
driven by Selenium) against a real server on a real SQLite store: the matrix shows the
seeded states in words and colour, the banner turns red when a node's image goes missing
(on the page's own refresh), a cell opens the target's detail with its log tail and a
copy button, hostile stored text stays text, and the page works at a phone's width."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from releasebot.domain.builds import job_name
from releasebot.domain.models import TargetState
from releasebot.domain.versions import Arch
from releasebot.store.sql import SqlStateStore
from releasebot.wiring import open_store, utc_now
from tests.support.overview import COVERED_TAGS, FAILED_TAG, PageServer, seed_overview, set_state
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
    set_state(store, COVERED_TAGS[1], TargetState.MISSING)
    browser.execute_script("refresh()")  # what the page's timer calls every 15 s
    _wait(browser, lambda b: "uncovered" in _banner(b)[0])
    _classes, text = _banner(browser)
    assert "2 nodes run Flatcar 4593.2.5 without an image (missing)" in text
    assert "gpu-a, gpu-b" in text
    assert browser.find_element(By.ID, "banner").value_of_css_property("color") != (
        browser.find_element(By.TAG_NAME, "body").value_of_css_property("color")
    )
    set_state(store, COVERED_TAGS[1], TargetState.PUBLISHED)
    browser.execute_script("refresh()")
    _wait(browser, lambda b: _banner(b)[0] == "banner covered")


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
