"""Real browser pages on one run: the host presses Start, students watch (one on a phone), and
everyone's live panel updates from the one watcher; the host lands on the Sample tab at the end."""
import json
import os
import urllib.request

import pytest

from tests.apphelpers import BROWSER_ARGS, CHROMIUM, RunningApp, needs_chromium

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]


def live_stats(app) -> dict:
    with urllib.request.urlopen(app.url + "live/stats", timeout=10) as answer:
        return json.load(answer)


def panel_state(page) -> dict:
    panel = page.locator("#live .live")
    return {"version": int(panel.get_attribute("data-version") or 0),
            "points": int(panel.get_attribute("data-points") or 0),
            "grid": panel.get_attribute("data-grid") or "", "state": panel.get_attribute("data-state") or ""}


def test_host_and_students_watch_one_run_then_sample_tab(tmp_path):
    from playwright.sync_api import expect, sync_playwright
    app = RunningApp(str(tmp_path)).wait_ready()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            # One browser context per person: pages of one context share its connection limit per host.
            host = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
            students = [browser.new_context(viewport={"width": 1280, "height": 800}).new_page() for _ in range(2)]
            phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                        has_touch=True).new_page()
            host.goto(app.url)
            for page in students:
                page.goto(app.url)
            phone.goto(app.url + "?view=watch")
            viewers = [host, *students, phone]
            for page in viewers:
                expect(page.locator("#live .live[data-version]")).to_have_count(1, timeout=60_000)

            steps = host.get_by_label("Training length (steps)")
            steps.fill("150")
            steps.press("Tab")
            host.get_by_role("button", name="Start", exact=True).click()

            # Every page's plots and grid change while the run trains, pushed to it.
            early = []
            for page in viewers:
                expect(page.locator("#live .live[data-grid*='live/grid/']")).to_have_count(1, timeout=240_000)
                early.append(panel_state(page))
            for page, before in zip(viewers, early):
                page.wait_for_function(f"document.querySelector('#live .live').dataset.points > {before['points']}",
                                       timeout=240_000)
            host.screenshot(path=str(tmp_path / "training.png"))

            # The student's phone view: no form, the grid first and wide, no horizontal scrolling.
            assert phone.get_by_role("button", name="Start", exact=True).is_hidden()
            assert phone.evaluate("document.documentElement.scrollWidth") <= 390
            grid_box = phone.locator("#live .live-grid img").bounding_box()
            status_box = phone.locator("#live .live-status").bounding_box()
            assert grid_box["width"] >= 300 and grid_box["y"] < status_box["y"], (grid_box, status_box)

            # The host lands on Sample with fresh samples from the run's final generator.
            expect(host.get_by_role("tab", name="Sample")).to_have_attribute("aria-selected", "true",
                                                                             timeout=400_000)
            expect(host.locator("#sample-caption")).to_contain_text("at step 150", timeout=30_000)
            host.get_by_role("tab", name="Train").click()
            for page, before in zip(viewers, early):
                final = panel_state(page)
                assert final["state"] == "done" and final["grid"] != before["grid"], (before, final)
            expect(host.locator("#live .live-status")).to_contain_text("done")

            # One rendering per change for everyone: the watcher rendered each snapshot once and sent
            # it to each of the 4 pages (messages), so renders do not grow with the number of viewers.
            stats = live_stats(app)
            run = [n for n in os.listdir(tmp_path) if os.path.exists(os.path.join(tmp_path, n, "config.json"))][0]
            writes = (len(open(os.path.join(tmp_path, run, "events.jsonl")).readlines())
                      + len(os.listdir(os.path.join(tmp_path, run, "grids"))))
            assert stats["viewers"] == 4, stats
            assert stats["renders"] <= writes + 10, (stats, writes)   # status-only changes: a few
            assert stats["messages_sent"] >= 4 * (stats["renders"] - 2), stats
            if os.environ.get("BLINK_SCREENSHOT"):
                host.screenshot(path=os.environ["BLINK_SCREENSHOT"], full_page=True)
            browser.close()
    finally:
        app.stop()
