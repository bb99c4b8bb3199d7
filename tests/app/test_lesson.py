"""The lesson as a teacher and a phone see it, in real chromium pages on the real app: before
Start an estimate; after Start the grid is the big thing on both screens; Stop is heard between
log steps; the Sample tab names its generator and draws the digit asked for; a refused zip leaves
the form usable."""
import io
import os

import numpy as np
import pytest
from PIL import Image

from tests.apphelpers import BROWSER_ARGS, CHROMIUM, RunningApp, needs_chromium

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]
LOG_EVERY = 1000


def grid_classes(png: bytes) -> np.ndarray:
    """What the shipped classifier calls each 28 px tile of a sample grid (2 px padding)."""
    from core import quality
    with Image.open(io.BytesIO(png)) as image:
        pixels = np.asarray(image.convert("L"))
    tile = 28 + 2
    rows, columns = (pixels.shape[0] - 2) // tile, (pixels.shape[1] - 2) // tile
    tiles = np.stack([pixels[2 + r * tile:2 + r * tile + 28, 2 + c * tile:2 + c * tile + 28]
                      for r in range(rows) for c in range(columns)])
    tiles = tiles[tiles.reshape(len(tiles), -1).max(1) > 0]       # the grid's empty cells are black
    return quality.classify(quality.load_classifier(), tiles)[1].argmax(1)


def grid_box(page) -> dict:
    return page.locator("#live .live-grid img").bounding_box()


def test_grid_fills_both_screens_stop_is_heard_between_log_steps_and_a_bad_zip_keeps_the_form(tmp_path):
    from playwright.sync_api import expect, sync_playwright
    bad_zip = tmp_path / "photos.zip"
    bad_zip.write_bytes(b"this is not a zip file")
    os.makedirs(tmp_path / "runs")
    app = RunningApp(str(tmp_path / "runs")).wait_ready()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            host = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
            phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                        has_touch=True).new_page()
            host.goto(app.url)
            phone.goto(app.url + "?view=watch")
            for page in (host, phone):
                expect(page.locator("#live .live[data-version]")).to_have_count(1, timeout=60_000)

            # A refused zip is said in the dataset note; the Dataset dropdown stays a dropdown.
            host.get_by_text("Dataset: upload your images, preview real ones").click()
            host.locator("#component-0 input[type=file], input[type=file]").first.set_input_files(str(bad_zip))
            expect(host.locator("#dataset-note")).to_contain_text("Upload refused", timeout=60_000)
            dataset = host.get_by_label("Dataset", exact=True)
            expect(dataset).to_be_editable()
            assert host.get_by_text("Error", exact=True).count() == 0
            dataset.click()
            host.get_by_role("option", name="Fashion-MNIST").click()
            expect(dataset).to_have_value("Fashion-MNIST")
            dataset.click()
            host.get_by_role("option", name="MNIST (bundled, offline)").click()

            # Before Start: how long the run will take here.
            steps = host.get_by_label("Training length (steps)")
            steps.fill("5000")
            steps.press("Tab")
            expect(host.locator("#estimate")).to_contain_text("for 5,000 steps on this CPU", timeout=30_000)
            host.get_by_text("Advanced: labels; how often to log, draw a grid and save").click()
            log_every = host.get_by_label("Log every (steps)")
            log_every.fill(str(LOG_EVERY))
            log_every.press("Tab")
            host.get_by_role("button", name="Start", exact=True).click()

            # The grid is the big thing on both screens, in view without scrolling; the form folds.
            for page in (host, phone):
                expect(page.locator("#live .live[data-grid*='live/grid/']")).to_have_count(1, timeout=240_000)
            page_width = {"host": 1366, "phone": 390}
            for name, page, least in (("host", host, 560), ("phone", phone, 300)):
                page.wait_for_function("document.querySelector('#live .live-grid img').naturalWidth > 0")
                box, viewport = grid_box(page), page.viewport_size
                assert box["width"] >= least, (name, box)
                assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"], (name, box, viewport)
                assert page.evaluate("document.documentElement.scrollWidth") <= page_width[name]
                charts = page.locator("#live svg[data-chart]").all()
                assert all(box["width"] * box["height"] > c.bounding_box()["width"] * c.bounding_box()["height"]
                           for c in charts), name
            expect(host.get_by_label("Dataset", exact=True)).to_be_hidden()

            # Stop mid-run: heard between log steps (log every 1000), with the final grid at that step.
            # (the status comes at log steps; the early grids, every 10 steps, show the run moving)
            host.wait_for_function("/[/]([2-9]\\d|\\d{3,})$/.test(document.querySelector('#live .live').dataset.grid)",
                                   timeout=240_000)
            host.get_by_role("button", name="Stop", exact=True).click()
            expect(host.locator("#blink-message")).to_contain_text("Stopping", timeout=30_000)
            for page in (host, phone):
                expect(page.locator("#live .live[data-state='stopped']")).to_have_count(1, timeout=120_000)
            panel = host.locator("#live .live")
            stopped = int(panel.get_attribute("data-step"))
            assert 0 < stopped < LOG_EVERY, stopped          # not at a log step: between them
            assert panel.get_attribute("data-grid").endswith(f"/{stopped}")

            # The run ended well, so the host's page went to Sample, whose caption names the generator
            # it shows: the live run's, saved at the stopped step.
            expect(host.locator("#sample-caption")).to_contain_text(f"at step {stopped}", timeout=60_000)
            # Ask for a digit (of the shipped generator: this short run draws no digits yet).
            host.get_by_label("Or pick a generator").click()
            host.get_by_role("option", name="The shipped generator (pre-trained)").click()
            expect(host.locator("#sample-caption")).to_contain_text("the shipped generator", timeout=60_000)
            host.get_by_label("Class", exact=True).click()
            host.get_by_role("option", name="7", exact=True).click()
            expect(host.locator("#sample-caption")).to_contain_text("Every sample is class 7", timeout=60_000)
            source = host.locator("#sample-grid img").get_attribute("src")
            digits = grid_classes(host.request.get(source).body())
            assert len(digits) >= 10 and (digits == 7).mean() >= 0.8, digits
            browser.close()
    finally:
        app.stop()
