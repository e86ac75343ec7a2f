"""Headless Chromium for the console's browser tests and tools/console_screenshots.py: Debian's
``chromium`` and ``chromium-driver`` (``make system-deps``), driven by selenium."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is absent: apt-get install chromium chromium-driver " \
                   f"(make system-deps), missing {pkg}"
    return None


@contextmanager
def chromium(width: int = 1360, height: int = 900) -> Iterator[Any]:
    """A fresh headless Chromium (its own profile dir), with the browser console log on."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="snakka-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--hide-scrollbars",
                 f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The browser console's entries of level SEVERE since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def basic_auth(driver: Any, user: str, password: str) -> None:
    """Send Basic credentials with every request of this browser (DevTools protocol)."""
    import base64

    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders",
                           {"headers": {"Authorization": f"Basic {token}"}})
