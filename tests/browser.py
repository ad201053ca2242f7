"""Debian's Chromium, driven by Playwright, for the tests that open the built book.

No browser is downloaded: Playwright starts the chromium that the system has
(``apt-get install -y chromium``). Tests that need it are skipped, saying why, on a
machine without it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Headless, as root (no sandbox), with no background traffic: the tests' pages are local
#: files and a local server, and the browser reaches for nothing else.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)"
)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's ``Browser``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


class PageWatch:
    """Opens pages with no network and collects what went wrong on each: console
    errors, uncaught exceptions and any request that left the machine."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.problems: list[str] = []
        self.context.route(
            lambda url: not url.startswith(("file:", "data:", "blob:", "about:")),
            self._refuse,
        )

    def _refuse(self, route: Any) -> None:
        self.problems.append(f"network request: {route.request.url}")
        route.abort()

    def open(self, url: str) -> Any:
        page = self.context.new_page()
        page.on(
            "console",
            lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"),
        )
        page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
        page.goto(url, wait_until="load")
        # MathJax typesets after loading; wait until it has finished (or is absent).
        page.evaluate(
            "() => (window.MathJax && MathJax.startup && MathJax.startup.promise)"
            " ? MathJax.startup.promise.then(() => true) : true"
        )
        return page
