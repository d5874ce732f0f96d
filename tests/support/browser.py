"""Headless Chromium driven by Selenium, with a virtual WebAuthn authenticator.

Selenium's calls block: tests run them through `asyncio.to_thread`, so the service and the web
inbox keep running on the test's event loop meanwhile.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
)  # fmt: skip


def chromium_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def require_chromium() -> tuple[str, str]:
    found = chromium_paths()
    if found is None:
        message = (
            "headless Chromium is not installed (Debian: apt-get install chromium "
            "chromium-driver; .ci/run installs them)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@contextmanager
def chromium(*, width: int = 1280, height: int = 900) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = require_chromium()
    options = Options()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="hg-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.binary_location = browser
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    if width < 500:  # below the smallest window Chromium makes: emulate the phone's screen
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True},
        )
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def add_authenticator(driver: Any) -> str:
    """A virtual platform authenticator that verifies the user (as a phone's biometrics do)."""
    from selenium.webdriver.common.virtual_authenticator import VirtualAuthenticatorOptions

    opts = VirtualAuthenticatorOptions()
    opts.protocol = VirtualAuthenticatorOptions.Protocol.CTAP2
    opts.transport = VirtualAuthenticatorOptions.Transport.INTERNAL
    opts.has_resident_key = True
    opts.has_user_verification = True
    opts.is_user_verified = True
    opts.is_user_consenting = True
    driver.add_virtual_authenticator(opts)
    return str(driver.virtual_authenticator_id)


def wait(driver: Any, condition: Callable[[Any], T], timeout: float = 20.0) -> T:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition)


def screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
