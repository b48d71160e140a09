"""The dashboard in a real headless browser (Debian's chromium, driven by playwright) against
real uvicorn and a real Redis: the printed URL signs the browser in (a cookie, the token gone
from the address), the runs page lists a finished run, a run page draws one timeline bar per
attempt, and a change made while the page is open arrives over server-sent events, which the
cookie opens as it opens the pages. A screenshot of each page is kept as a test artifact."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from teamctl.shared.board import WriteOutcome

from tests.support.web import (
    TOKEN,
    TTL_S,
    dashboard_command,
    finish_run,
    finished_run,
    reclaim_first_attempt,
    served,
    start_run,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT_MS = 15_000


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """Where screenshots go: $TEAMCTL_TEST_ARTIFACTS if set, else the test's tmp_path."""
    root = Path(os.environ.get("TEAMCTL_TEST_ARTIFACTS") or tmp_path)
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture
def page(artifacts: Path) -> Iterator[object]:
    """A fresh page of headless chromium; the test fails (never skips) without chromium."""
    executable = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if executable is None:
        pytest.fail(
            f"no chromium at {CHROMIUM} nor on PATH: the browser tests need it "
            "(scripts/setup installs Debian's chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


def screenshot(page: object, artifacts: Path, name: str) -> None:
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    assert path.stat().st_size > 0
    print(f"screenshot: {path}")


def test_the_runs_page_lists_a_finished_run_and_its_page_one_bar_per_attempt(
    redis_url: str, conn: redis.Redis, run_id: str, page: object, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    finished_run(conn, run_id)
    with served(redis_url) as base:
        page.goto(f"{base}/?token={TOKEN}")  # type: ignore[attr-defined]
        expect(page).to_have_url(f"{base}/")  # type: ignore[arg-type]
        row = page.locator(f'tr[data-run="{run_id}"]')  # type: ignore[attr-defined]
        expect(row).to_contain_text("completed")
        expect(row).to_contain_text("completed 2")
        screenshot(page, artifacts, "runs")

        row.get_by_role("link").click()
        expect(page).to_have_url(f"{base}/runs/{run_id}")  # type: ignore[arg-type]
        bars = page.locator("svg.timeline g.bar")  # type: ignore[attr-defined]
        expect(bars).to_have_count(3)
        expect(page.locator('svg.timeline g.bar[data-task="a"]')).to_have_count(2)  # type: ignore[attr-defined]
        expect(page.locator("svg.timeline g.bar.o-reclaimed")).to_have_count(1)  # type: ignore[attr-defined]
        expect(page.locator("svg.timeline .mark.stale")).to_have_count(1)  # type: ignore[attr-defined]
        expect(page.locator("svg.dag g.node")).to_have_count(2)  # type: ignore[attr-defined]
        # The model's markup is text on the page, never an element.
        expect(page.locator("#task-a pre.output")).to_contain_text("<script>")  # type: ignore[attr-defined]
        assert page.evaluate("document.querySelectorAll('main script').length") == 0  # type: ignore[attr-defined]
        expect(page.locator("#live-state")).to_have_text("ended", timeout=WAIT_MS)  # type: ignore[attr-defined]
        screenshot(page, artifacts, "run")


def test_a_change_arrives_over_sse_while_the_run_progresses(
    redis_url: str, conn: redis.Redis, run_id: str, page: object, artifacts: Path
) -> None:
    """`teamctl dashboard` as a user starts it: its pages refuse a browser until it opens the
    printed URL; then the run page's stream and its reloads, opened by the cookie, follow the
    run live."""
    from playwright.sync_api import expect

    run = start_run(conn, run_id)
    with dashboard_command(redis_url) as printed:
        base = printed.base
        refused = page.goto(f"{base}/runs/{run_id}")  # type: ignore[attr-defined]
        assert refused.status == 401
        expect(page.locator("body")).to_contain_text(  # type: ignore[attr-defined]
            "open the URL `teamctl dashboard` printed"
        )
        page.goto(printed.url)  # type: ignore[attr-defined]
        expect(page).to_have_url(f"{base}/")  # type: ignore[arg-type]
        [cookie] = page.context.cookies()  # type: ignore[attr-defined]
        assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
        page.goto(f"{base}/runs/{run_id}")  # type: ignore[attr-defined]
        live = page.locator("#live-state")  # type: ignore[attr-defined]
        expect(live).to_have_text("live", timeout=WAIT_MS)
        expect(page.locator("svg.timeline g.bar")).to_have_count(0)  # type: ignore[attr-defined]

        stale = reclaim_first_attempt(conn, run)  # claimed on hostA:101, expired, reclaimed
        log = page.locator("#live-log")  # type: ignore[attr-defined]
        expect(log).to_contain_text("a in_progress on hostA:101", timeout=WAIT_MS)
        expect(log).to_contain_text("a reclaimed", timeout=WAIT_MS)
        # The page reloads its body after a change: the attempt is drawn, reclaimed.
        expect(page.locator("svg.timeline g.bar.o-reclaimed")).to_have_count(  # type: ignore[attr-defined]
            1, timeout=WAIT_MS
        )

        token = run.board.claim("a", "m1", "hostB:202", TTL_S)
        assert token is not None
        expect(log).to_contain_text("a in_progress on hostB:202", timeout=WAIT_MS)
        expect(page.locator("svg.timeline g.bar.o-running")).to_have_count(  # type: ignore[attr-defined]
            1, timeout=WAIT_MS
        )
        assert run.board.release("a", token, "handoff") is WriteOutcome.APPLIED
        finish_run(conn, run, stale)
        expect(live).to_have_text("ended", timeout=WAIT_MS)
        expect(page.locator('svg.timeline g.bar[data-task="a"]')).to_have_count(  # type: ignore[attr-defined]
            3, timeout=WAIT_MS
        )
        screenshot(page, artifacts, "run-live")
