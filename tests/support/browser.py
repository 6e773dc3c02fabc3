"""Headless Chromium for tests of the HTML reports: a screenshot of a page and its DOM after loading.

Debian's ``chromium`` package; ``make test`` installs it when it is missing (the Makefile's ``chromium`` target).
A test that needs it fails, saying how to install it, rather than passing without looking at the page."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: Seconds a page may take to load and render.
TIMEOUT_S = 120


def chromium() -> str:
    """The Chromium executable, or the test fails naming the fix."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("Chromium is not installed: `make chromium` installs it (apt-get install chromium)")


def _run(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    # --no-sandbox: the tests run as root in CI; a profile of its own per call, so concurrent runs never share one
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
           "--no-first-run", f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, check=True)


def screenshot(page: Path, out: Path, *, width: int = 1200, height: int = 4000) -> Path:
    """A PNG of ``page`` rendered in a ``width`` x ``height`` window (the page's top ``height`` pixels)."""
    _run(page, out.with_suffix(".profile"), f"--window-size={width},{height}", f"--screenshot={out}")
    assert out.exists() and out.stat().st_size > 0, f"Chromium wrote no screenshot of {page}"
    return out


def dump_dom(page: Path, scratch: Path) -> str:
    """The DOM of ``page`` after loading, serialised."""
    return _run(page, scratch / "dom.profile", "--dump-dom").stdout.decode("utf-8")
