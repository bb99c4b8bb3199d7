"""The Sample tab in real chromium pages, at a projector's, a host's and a phone's size (issue 27).

The server's current run is finished (APP_SETUP: the shipped generator saved as a run's, its
classes named, with grids), so the Train tab shows its live grid at once and nothing trains.
On each screen every Sample output is drawn at least as large as the live grid on that screen:
its width, or, for a shape that the screen's height limits (a square GIF), its height. On the
projector: each output says which generator made it, a named class is called by its name, a
number typed into a slider's box and Enter sets it and the output follows, Escape in the
generator picker changes nothing, and a timelapse that cannot be made says why.
"""
import os

import pytest

from tests.apphelpers import needs_chromium, seed_finished_run

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]
STEP = 200
NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SCREENS = {"projector": (1280, 720), "host": (1440, 900), "phone": (390, 844)}
OUTPUTS = ("sample-grid", "sample-strip", "sample-gif", "sample-explored", "sample-neighbours",
           "sample-timelapse", "sample-step-grid")
# What an <img> draws (object-fit: contain in its box): width and height in CSS pixels.
DRAWN = """img => { const box = img.getBoundingClientRect();
  const scale = Math.min(box.width / img.naturalWidth, box.height / img.naturalHeight);
  return [img.naturalWidth * scale, img.naturalHeight * scale]; }"""


def APP_SETUP(folder) -> None:
    """A finished run, as a restarted server finds it: 60 fixed-noise digits a grid (10 classes, 6
    rows, as the trainer draws them) at two steps, the real images, and a generator with class names."""
    run = seed_finished_run(str(folder / "runs"), NAMES, STEP, grid_steps=(100, STEP), tiles=60)
    run.write_status("done", "Finished.", step=STEP, steps=STEP, gan="dcgan", classes=10, class_names=NAMES)


def live_grid_box(page) -> dict:
    # Drawn once the live panel has its grid and fitted it (app/static/live.js fitGrid).
    page.wait_for_function("((document.querySelector('#live .live-grid img.fakes') || {}).style || {}).width > ''",
                           timeout=60_000)
    return page.locator("#live .live-grid img.fakes").bounding_box()


def make_every_output(page) -> None:
    from playwright.sync_api import expect
    page.get_by_role("tab", name="Sample").click()
    expect(page.locator("#sample-caption")).to_contain_text("Generator: run", timeout=60_000)
    for button in ("Interpolate", "Make GIF", "Render", "Nearest real images"):
        page.get_by_role("button", name=button, exact=True).click()
    page.get_by_text("Training timelapse", exact=True).click()
    page.get_by_role("button", name="Load timelapse", exact=True).click()
    for output in OUTPUTS:
        page.wait_for_function(f"(document.querySelector('#{output} img') || {{}}).naturalWidth > 0", timeout=60_000)


def assert_as_large_as(page, live: dict, screen: str) -> None:
    for output in OUTPUTS:
        drawn = page.locator(f"#{output} img").evaluate(DRAWN)
        assert drawn[0] >= live["width"] - 0.5 or drawn[1] >= live["height"] - 0.5, (screen, output, drawn, live)
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"], screen


def test_sample_outputs_are_as_large_as_the_live_grid_and_name_their_generator(app, person):
    from playwright.sync_api import expect
    run = next(name for name in os.listdir(app.runs_root) if os.path.isdir(os.path.join(app.runs_root, name)))
    who = f"Generator: run {run} at step {STEP}"
    width, height = SCREENS["projector"]
    page = person(viewport={"width": width, "height": height})
    page.goto(app.url)
    live = live_grid_box(page)
    make_every_output(page)
    assert_as_large_as(page, live, "projector")
    # The host's screen: the same page, the window resized (on the Train tab, where the grid is fitted).
    page.get_by_role("tab", name="Train").click()
    width, height = SCREENS["host"]
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_function(f"innerWidth === {width} && innerHeight === {height}")   # its resize handler has run
    live = live_grid_box(page)
    page.get_by_role("tab", name="Sample").click()
    assert_as_large_as(page, live, "host")
    # A student's phone, on the students' view.
    width, height = SCREENS["phone"]
    phone = person(viewport={"width": width, "height": height}, is_mobile=True, has_touch=True)
    phone.goto(app.url + "?view=watch")
    live = live_grid_box(phone)
    make_every_output(phone)
    assert_as_large_as(phone, live, "phone")
    for screen in (page, phone):
        for output in ("sample-strip", "sample-gif", "sample-gif-file"):
            expect(screen.locator(f"#{output} [data-testid=block-label]")).to_contain_text(who)
        for text in ("explore-caption", "neighbour-caption"):
            expect(screen.locator(f"#{text}")).to_contain_text(who)
        expect(screen.locator("#timelapse-caption")).to_contain_text(f"Run {run}'s fixed-noise grids: 2 grids")
    phone.context.close()

    # On the host's page: the other outputs name their generator too; a class is called by its name.
    caption = page.locator("#sample-caption")
    page.get_by_role("button", name="Download samples (zip of PNGs)").click()
    expect(page.locator("#sample-zip [data-testid=block-label]")).to_contain_text(who, timeout=30_000)
    page.get_by_text("Generator files", exact=True).click()
    page.get_by_role("button", name="Download generator", exact=True).click()
    expect(page.locator("#generator-files [data-testid=block-label]")).to_contain_text(who, timeout=30_000)
    page.get_by_label("Class", exact=True).click()
    page.get_by_role("option", name="seven", exact=True).click()
    expect(caption).to_contain_text("Every sample is class 'seven'.", timeout=30_000)

    # A number typed into a slider's box, then Enter: set, and the output follows.
    count = page.get_by_label("number input for Count")
    count.fill("16")
    count.press("Enter")
    expect(caption).to_contain_text("16 samples", timeout=30_000)
    steps = page.get_by_label("number input for Steps")
    steps.fill("4")
    steps.press("Enter")
    page.wait_for_function("document.querySelector('#sample-strip img').naturalWidth === 4 * 30 + 2", timeout=30_000)
    psi = page.get_by_label("number input for Truncation psi")
    psi.fill("0.5")
    psi.press("Enter")
    expect(page.locator("#explore-caption")).to_contain_text("psi 0.50", timeout=30_000)

    # Escape in the generator picker, then a click elsewhere: the same generator, nothing redrawn.
    before = caption.inner_text()
    picker = page.get_by_label("Or pick a generator")
    picker.click()
    picker.press("Escape")
    caption.click()
    page.wait_for_timeout(1000)        # time for a pick to be sampled and shown, were one made
    assert caption.inner_text() == before and picker.input_value() == ""
    assert page.locator("[data-testid=toast-body]").count() == 0

    # The shipped generator has no grids: the timelapse says so.
    picker.click()
    page.get_by_role("option", name="The shipped generator (pre-trained)").click()
    expect(caption).to_contain_text("Generator: the shipped generator", timeout=30_000)
    page.get_by_role("button", name="Load timelapse", exact=True).click()
    expect(page.locator("[data-testid=toast-body]")).to_contain_text(
        "No training grids yet: the timelapse plays a run's fixed-noise grids, and the shipped generator has none",
        timeout=30_000)
    page.context.close()
