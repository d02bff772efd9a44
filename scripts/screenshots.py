"""Screenshots of the coverage page: desktop and phone, light and dark, into build/screenshots/.

    uv run python scripts/screenshots.py [--out build/screenshots]

It starts ``releasebot demo --serve`` on a free loopback port (the demo's feeds, simulated
fleet and builds), drives Debian's chromium headless through chromedriver (Selenium), and
writes the overview, the matrix filtered through the page's address (``?state=published&q=4593``)
and a failed target's detail per size and colour scheme, as full-page PNGs a person can
look at. Needs ``chromium`` and ``chromium-driver``.
"""

from __future__ import annotations

import argparse
import base64
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
SCHEMES = ("light", "dark")


def start_demo() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "releasebot", "demo", "--serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if "http://" in line:
            return process, line[line.index("http://") :].split()[0]
    process.kill()
    raise SystemExit("releasebot demo --serve printed no URL")


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(argument)
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(options=options, service=Service(driver))


def full_page(driver: webdriver.Chrome, path: Path, width: int) -> None:
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    height = math.ceil(metrics["cssContentSize"]["height"])
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def wait_drawn(driver: webdriver.Chrome) -> None:
    WebDriverWait(driver, 20).until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#matrix a.cell")
            and "unknown" not in (d.find_element(By.ID, "banner").get_attribute("class") or "")
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/screenshots", type=Path)
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    process, url = start_demo()
    driver = browser()
    try:
        for size, (width, height) in SIZES.items():
            driver.set_window_size(width, height)
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {
                    "width": width,
                    "height": height,
                    "deviceScaleFactor": 1,
                    "mobile": size == "phone",
                },
            )
            for scheme in SCHEMES:
                driver.execute_cdp_cmd(
                    "Emulation.setEmulatedMedia",
                    {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
                )
                driver.get(url)
                wait_drawn(driver)
                full_page(driver, out / f"overview-{size}-{scheme}.png", width)
                driver.get(url + "?state=published&q=4593")
                WebDriverWait(driver, 20).until(
                    lambda d: "(filtered)" in d.find_element(By.ID, "counts").text
                )
                full_page(driver, out / f"filtered-{size}-{scheme}.png", width)
                driver.get(url)
                wait_drawn(driver)
                cell = driver.find_element(By.CSS_SELECTOR, "#matrix a.cell.s-failed")
                driver.get(url + "#/target/" + (cell.get_attribute("data-tag") or ""))
                WebDriverWait(driver, 20).until(
                    lambda d: d.find_elements(By.CSS_SELECTOR, "#detail:not([hidden]) pre.log")
                )
                full_page(driver, out / f"detail-{size}-{scheme}.png", width)
        print(f"screenshots in {out}/: " + ", ".join(sorted(p.name for p in out.glob("*.png"))))
    finally:
        driver.quit()
        process.terminate()
        process.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
