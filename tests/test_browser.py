"""One real browser session: press Start, watch the plot and grid change, land on the Sample tab."""
import os
import shutil

import pytest

from tests.apphelpers import RunningApp

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.skipif(not os.path.exists(CHROMIUM) or shutil.which("chromium") is None,
                    reason="Debian's chromium is not installed (apt-get install chromium)")
def test_start_watch_then_sample_tab(tmp_path):
    from playwright.sync_api import expect, sync_playwright
    app = RunningApp(str(tmp_path)).wait_ready()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(app.url)
            steps = page.get_by_label("Training length (steps)")
            steps.fill("150")
            steps.press("Tab")
            page.get_by_role("button", name="Start", exact=True).click()

            grid = page.locator("#sample-grid img")
            expect(grid).to_have_count(1, timeout=240_000)
            first_grid = grid.get_attribute("src")
            plot = page.locator("#loss-plot")
            expect(plot.locator("canvas, svg").first).to_be_visible(timeout=120_000)
            page.screenshot(path=str(tmp_path / "training.png"))
            # The plot and the grid change as training goes, and the page lands on Sample at the end.
            expect(page.get_by_role("tab", name="Sample")).to_have_attribute("aria-selected", "true",
                                                                             timeout=400_000)
            # ...with fresh samples from the run's final generator, not the shipped one.
            expect(page.get_by_text("generator from step 150")).to_be_visible(timeout=30_000)
            page.get_by_role("tab", name="Train").click()
            assert grid.get_attribute("src") != first_grid
            expect(page.locator("#status")).to_contain_text("done")
            if os.environ.get("BLINK_SCREENSHOT"):
                page.screenshot(path=os.environ["BLINK_SCREENSHOT"], full_page=True)
            browser.close()
    finally:
        app.stop()
