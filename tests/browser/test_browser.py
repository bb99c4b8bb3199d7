"""Real chromium pages on one real app, as a lesson uses it (one app and one browser for the
module; one browser context per person, since pages of one context share its connection limit per
host). The app listens on every address with a host key, as a classroom's `--host 0.0.0.0` makes
one; the host's pages type the key, as a host does. Its current run at start is a finished one,
seeded with nothing trained (APP_SETUP: the shipped generator saved as a run's, its ten classes
named, two of them with markup, with grids at two steps): the tests about the page run against it,
in file order, and the one run trained for real comes last.
- class names with markup are text on every page (issue 45): the live panel's status line and
  Diagnostics (written as the trainer writes text), the Sample captions and the class pickers;
  names reach the page from a host's generator upload or a zip's folders;
- the Sample tab at a projector's, a host's and a phone's size (issue 27): every output is drawn at
  least as large as the live grid on that screen (its width, or, for a shape that the screen's
  height limits (a square GIF), its height); on the projector each output says which generator
  made it, a named class is called by its name, a number typed into a slider's box and Enter sets
  it and the output follows, Escape in the generator picker changes nothing, and a timelapse that
  cannot be made says why, in a toast headed "Not done" (not Gradio's "Error");
- a page load and the Sample tab leave the UI process without torch; on each screen (projector,
  host, phone) the crawl warning offers a batch that does not crawl, and "steps 2.5" and "seed 1.5"
  are refused naming the field (from the page and the named API), not rounded into a run;
- reached by a network address, the host's page tops the live panel with the students' link; once a
  run is shown its QR code is folded to that line, so the whole grid fits a projector's first
  screen, and a click shows a QR code a seat can scan;
- an earlier run of the same images, picked by the host on the page, stands beside the live run on
  the projector, the host's screen and a phone: its grid beside the live grid at one size, both in
  view, its loss curves dashed on the same chart, and what differs in words; then the live run alone;
- one run, trained for real, as a teacher, the room and a phone see it: before Start an estimate,
  and a refused zip leaves the form usable; after Start the grid is the big thing on every screen,
  the phone's view has no form, and every live panel updates from the one watcher; a paused run
  steps one update with the grid before it shown; Stop says "stopping..." on the click, is heard
  between log steps and leaves the room on the grid; D's learning rate changed while paused is
  marked on every page's loss chart; on the projector, the host's screen and a
  phone the log-scale box shows its state, the legend's number is the newest reading (where the smoothed
  line ends named), the step axis has round ticks, the diagnostics use words; a phone opens the primer on this
  run's losses; the Sample tab names the stopped run's generator; resumed, the run ends and the host
  lands on the Sample tab, which draws the digit asked for."""
import io
import json
import os
import re
import urllib.request

import numpy as np
import pytest
from PIL import Image

from tests.apphelpers import seed_finished_run, torch_loaded

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.needs("chromium")]
HOST_KEY = "the-host-key"
# As `python app.py --host 0.0.0.0 --host-key KEY` (app.py reads both flags' defaults from these).
APP_ENV = {"GRADIO_SERVER_NAME": "0.0.0.0", "BLINK_HOST_KEY": HOST_KEY}
SEEDED_STEP = 200
IMG, BOLD = "<img src=x id=pwn>", "<b id=bold>"
NAMES = [IMG, BOLD, "two", "three", "four", "five", "six", "seven", "eight", "nine"]
MARKUP = "#pwn, #bold"          # the elements the names would make, were they drawn as HTML
LOG_EVERY = 1000
RESUMED_STEPS = 10              # how far the stopped run is resumed: to its end, a few steps on

# The three screens of a lesson: a projector, the host's own screen, and a phone.
PROJECTOR = dict(viewport={"width": 1280, "height": 720})
HOST_SCREEN = dict(viewport={"width": 1440, "height": 900})
PHONE = dict(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
SCREENS = {"projector": PROJECTOR, "host": HOST_SCREEN, "phone": PHONE}


def APP_SETUP(folder) -> None:
    """A finished run, as a restarted server finds it: 60 fixed-noise digits a grid (10 classes, 6
    rows, as the trainer draws them) at two steps, the real images, a generator whose classes have
    names, and a status whose message and Diagnostics carry two of them as the trainer writes text."""
    run = seed_finished_run(str(folder / "runs"), NAMES, SEEDED_STEP, grid_steps=(100, SEEDED_STEP), tiles=60)
    run.write_status("done", f"Finished. Classes {IMG} and {BOLD}.", step=SEEDED_STEP, steps=SEEDED_STEP,
                     gan="dcgan", classes=10, class_names=NAMES, diagnostics={"class_names": f"{IMG}, {BOLD}"})


def runs(app) -> list[str]:
    """The app's run folders, oldest first (a run's name starts with its time)."""
    return sorted(n for n in os.listdir(app.runs_root) if os.path.isdir(os.path.join(app.runs_root, n)))


def live_stats(app) -> dict:
    with urllib.request.urlopen(app.url + "live/stats", timeout=10) as answer:
        return json.load(answer)


def type_the_host_key(page) -> None:
    page.get_by_label("Host key", exact=True).fill(HOST_KEY)


# ---- class names with markup (the seeded run) ------------------------------------------------

def test_markup_in_class_names_is_text_in_the_live_panel_the_captions_and_the_pickers(app, person):
    from playwright.sync_api import expect
    page = person(viewport={"width": 1280, "height": 800})
    page.goto(app.url)
    # The live panel: the status line and the Diagnostics rows say the names as text.
    status = page.locator("#live .live-status")
    expect(status).to_contain_text(f"Classes {IMG} and {BOLD}.", timeout=60_000)
    diagnostics = page.locator("#live .live-diagnostics")
    diagnostics.locator("summary").click()
    expect(diagnostics).to_contain_text(f"{IMG}, {BOLD}")
    assert page.locator(MARKUP).count() == 0

    # The Sample tab: the caption names the seed's class, as text.
    page.get_by_role("tab", name="Sample").click()
    caption = page.locator("#sample-caption")
    expect(caption).to_contain_text(f"starting from class '{IMG}' (seed mod 10)", timeout=60_000)
    assert page.locator(MARKUP).count() == 0
    # The class picker lists the names as text; one picked, the caption says it.
    page.get_by_label("Class", exact=True).click()
    expect(page.get_by_role("option", name=IMG, exact=True)).to_be_visible()
    assert page.locator(MARKUP).count() == 0
    page.get_by_role("option", name=BOLD, exact=True).click()
    expect(caption).to_contain_text(f"Every sample is class '{BOLD}'.", timeout=30_000)
    expect(page.get_by_label("Class", exact=True)).to_have_value(BOLD)
    # The interpolation's class pickers too, once the first picker's list has closed (a list still
    # closing as the next opens would show two of each name).
    expect(page.get_by_role("option")).to_have_count(0)
    page.get_by_label("Class A", exact=True).click()
    expect(page.get_by_role("option", name=IMG, exact=True)).to_be_visible()
    assert page.locator(MARKUP).count() == 0


# ---- the Sample tab's outputs (the seeded run) ------------------------------------------------

OUTPUTS = ("sample-grid", "sample-strip", "sample-gif", "sample-explored", "sample-neighbours",
           "sample-timelapse", "sample-step-grid")
# What an <img> draws (object-fit: contain in its box): width and height in CSS pixels.
DRAWN = """img => { const box = img.getBoundingClientRect();
  const scale = Math.min(box.width / img.naturalWidth, box.height / img.naturalHeight);
  return [img.naturalWidth * scale, img.naturalHeight * scale]; }"""


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
    run = runs(app)[0]   # the seeded run, the only one yet
    who = f"Generator: run {run} at step {SEEDED_STEP}"
    page = person(**PROJECTOR)
    page.goto(app.url)
    live = live_grid_box(page)
    make_every_output(page)
    assert_as_large_as(page, live, "projector")
    # The host's screen: the same page, the window resized (on the Train tab, where the grid is fitted).
    page.get_by_role("tab", name="Train").click()
    width, height = HOST_SCREEN["viewport"]["width"], HOST_SCREEN["viewport"]["height"]
    page.set_viewport_size(HOST_SCREEN["viewport"])
    page.wait_for_function(f"innerWidth === {width} && innerHeight === {height}")   # its resize handler has run
    live = live_grid_box(page)
    page.get_by_role("tab", name="Sample").click()
    assert_as_large_as(page, live, "host")
    # A student's phone, on the students' view.
    phone = person(**PHONE)
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
    # Headed "Not done" (what happened), not Gradio's "Error" (app/errors.py REFUSAL_TOAST_CSS).
    title = page.locator("[data-testid=toast-body] .toast-title").first
    assert title.evaluate("t => getComputedStyle(t, '::before').content") == '"Not done"'
    assert title.evaluate("t => getComputedStyle(t).fontSize") == "0px"
    page.context.close()


# ---- the page and its form (the seeded run; nothing trains) -------------------------------------

def refused_on_the_page(page, field, value: str, message: str) -> None:
    """Type `value` into `field`, press Start, and see the project's refusal (naming the field) on screen."""
    from playwright.sync_api import expect
    # Typed again if the box took its first value after the fill: a box in an accordion just opened
    # does so a few milliseconds after it appears, faster than a person but not than Playwright
    # (seen: Seed back at 0, and Start then began a run; lab/README.md).
    for _ in range(5):
        field.fill(value)
        field.press("Tab")
        page.wait_for_timeout(300)
        if field.input_value() == value:
            break
    expect(field).to_have_value(value)
    page.get_by_role("button", name="Start", exact=True).click()
    refusal = page.get_by_text(message, exact=True)
    expect(refusal).to_be_visible(timeout=60_000)
    expect(refusal).to_be_in_viewport()


def check_the_form(page, name: str) -> None:
    """The walk's form findings, on one screen of the host's: the crawl warning offers settings that
    do not crawl (it told a batch-128 WGAN-GP run to use batch 128), and "steps 2.5" and "seed 1.5"
    are refused naming the field, not rounded into a run."""
    from playwright.sync_api import expect
    estimate, settings, more = page.locator("#estimate"), page.locator("#blink-settings"), page.locator("#blink-more")
    type_the_host_key(page)   # without it Start is refused as not the host's, before the form is read
    expect(estimate).to_contain_text(re.compile("About|Time estimate"), timeout=120_000)
    settings.get_by_label("GAN type", exact=True).click()
    page.get_by_role("option", name="WGAN-GP").click()
    batch = settings.get_by_label("Batch size", exact=True)
    expect(batch).to_have_value("0")   # 0: the GAN type's batch (core/gans.py); the walk asks for 128
    batch.fill("128")
    expect(estimate).to_contain_text("at batch 128", timeout=30_000)
    warning = estimate.inner_text()
    offered = [int(b) for b in re.findall(r"with batch (\d+)", warning)]
    assert "will crawl" in warning and offered and all(b < 128 for b in offered), (name, warning)
    settings.get_by_label("GAN type", exact=True).click()
    page.get_by_role("option", name="DCGAN (non-saturating)").click()
    steps = settings.get_by_label("Training length (steps)", exact=True)
    refused_on_the_page(page, steps, "2.5", "Training length (steps) must be a whole number (got 2.5).")
    steps.fill("50")
    page.get_by_text("Advanced: labels; augmentation; how often to log, draw a grid and save").click()
    refused_on_the_page(page, more.get_by_label("Seed", exact=True), "1.5", "Seed must be a whole number (got 1.5).")


def test_a_page_load_and_the_sample_tab_leave_the_ui_process_without_torch(app, person):
    from playwright.sync_api import expect
    before = runs(app)
    page = person(**PROJECTOR)
    page.goto(app.url)
    # On the projector the host's Start is in view without scrolling: with a run presented (the
    # seeded one) the host's controls sit above the live panel.
    start = page.get_by_role("button", name="Start", exact=True)
    expect(start).to_be_visible(timeout=60_000)
    box = start.bounding_box()
    assert box["y"] + box["height"] <= PROJECTOR["viewport"]["height"], box
    # What the page's load events fill in: the time estimate (its preset chosen for this
    # device), the dataset's note and its real images (in an accordion, closed at first).
    expect(page.locator("#estimate")).to_contain_text(re.compile("About|Time estimate"), timeout=120_000)
    page.get_by_role("button", name="Dataset: upload your images").click()
    expect(page.locator("#dataset-note")).to_contain_text("always available", timeout=120_000)
    expect(page.locator("#dataset-preview img")).to_have_count(1, timeout=120_000)
    page.get_by_role("tab", name="Sample").click()
    expect(page.locator("#sample-caption")).to_contain_text("Generator:", timeout=120_000)
    page.get_by_role("tab", name="Train").click()

    # The form on each screen (a phone too: a host may start a run from one); the refusals start no run.
    check_the_form(page, "projector")
    page.context.close()   # a page left open redraws at Gradio's frame rate: each screen is closed once seen
    for name in ("host", "phone"):
        form = person(**SCREENS[name])
        form.goto(app.url)
        check_the_form(form, name)
        form.context.close()
    # The named API refuses the same fractions, naming the field: nothing rounds them on the way.
    from gradio_client.exceptions import AppError
    client = app.client()
    form = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=128, precision="fp32",
                device="cpu", steps=50, seed=0, key=HOST_KEY)
    for field, value, message in (("steps", 2.5, "Training length (steps) must be a whole number (got 2.5)."),
                                  ("seed", 1.5, "Seed must be a whole number (got 1.5).")):
        with pytest.raises(AppError, match=re.escape(message)):
            client.predict(**{**form, field: value}, api_name="/start")
    assert runs(app) == before   # no run
    assert not torch_loaded(app.process.pid)


# ---- the students' link (reached by a network address) -----------------------------------------

def network_address() -> str | None:
    """This machine's address on its network (where a default route leads), or None. A UDP
    connect only picks the route: nothing is sent."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_the_students_link_and_qr_code_top_the_live_panel_on_a_network_address(app, person):
    from playwright.sync_api import expect
    address = network_address()
    if address is None:
        pytest.skip("this machine has no network address to open the page by")
    page = person(**PROJECTOR)
    page.goto(f"http://{address}:{app.port}/")
    join = page.locator("#join-link .blink-join")
    # A run is shown (the seeded one): the QR code is folded to its line, which still gives the
    # link, and the whole grid is on the projector's first screen.
    expect(join.locator("summary")).to_contain_text(f"http://{address}:{app.port}/?view=watch", timeout=60_000)
    expect(join).not_to_have_attribute("open", "")
    grid = live_grid_box(page)
    assert grid["y"] + grid["height"] <= PROJECTOR["viewport"]["height"], grid
    # A click shows the QR code, big enough to scan from a seat, above the live panel; another folds it.
    join.locator("summary").click()
    qr, live = join.locator("svg").bounding_box(), page.locator("#live").bounding_box()
    assert qr["width"] >= 250 and qr["y"] + qr["height"] <= live["y"], (qr, live)
    join.locator("summary").click()
    expect(join.locator("svg")).to_be_hidden()


# ---- runs side by side (a second seeded run) ---------------------------------------------------

def test_an_earlier_run_beside_the_live_one_on_every_screen(app, person):
    """The host picks an earlier run of the same images on the page; the projector, the host's
    screen and a phone each show its grid beside the live one, both in view without scrolling,
    its loss curves dashed on the live run's chart, and what differs in words."""
    from playwright.sync_api import expect
    from tests.filehelpers import cpu_plan
    earlier = seed_finished_run(app.runs_root, NAMES, SEEDED_STEP, grid_steps=(100, SEEDED_STEP), tiles=60)
    earlier.write_plan(cpu_plan(gan="dcgan", steps=SEEDED_STEP, grid_every=100, checkpoint_every=SEEDED_STEP, lr_d=2e-3))
    for step in range(20, SEEDED_STEP + 1, 20):
        earlier.append_event({"step": step, "loss_d": 1.2 - step / 1000, "loss_g": 0.8 + step / 1000})
    earlier.write_status("done", "Finished.", step=SEEDED_STEP, steps=SEEDED_STEP, gan="dcgan")
    pages = {name: person(**SCREENS[name]) for name in SCREENS}
    for name, page in pages.items():
        page.goto(app.url + ("?view=watch" if name == "phone" else ""))
    host = pages["host"]
    type_the_host_key(host)
    host.get_by_text("Compare runs", exact=True).click()
    picker = host.get_by_label("Compare with", exact=True)
    # Chosen by typing: the options list is placed where the box was when it opened, and a layout
    # still settling (the panel just opened) can leave it outside the window for a pointer.
    picker.click()
    picker.fill(earlier.name)
    expect(host.get_by_role("option", name=re.compile(re.escape(earlier.name)))).to_have_count(1)
    picker.press("Enter")
    expect(picker).to_have_value(re.compile(re.escape(earlier.name)))
    host.get_by_role("button", name="Show side by side", exact=True).click()
    expect(host.locator("#blink-message")).to_contain_text("beside the live run on every page", timeout=30_000)
    host.evaluate("window.scrollTo(0, 0)")
    for name, page in pages.items():
        compared = page.locator("#live .live-compare img.compared")
        expect(compared).to_have_attribute("src", f"live/grid/{earlier.name}/{SEEDED_STEP}", timeout=30_000)
        page.wait_for_function("document.querySelector('#live img.compared').naturalWidth > 0 && "
                               "document.querySelector('#live img.compared').style.width > ''")
        live, other = grid_box(page), compared.bounding_box()
        viewport = page.viewport_size
        assert other["x"] >= live["x"] + live["width"] - 1 and abs(other["y"] - live["y"]) < 2, (name, live, other)
        assert abs(other["width"] - live["width"]) < 2 and other["width"] >= (140 if name == "phone" else 250), (name, other)
        assert other["y"] + other["height"] <= viewport["height"], (name, other, viewport)
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"], name
        # The compared grid framed by its own run's D, as the live grid is by the live run's.
        expect(page.locator("#live .live-compare .verdict")).to_have_count(60)
        # Each grid captioned by what differs, its own value, and then which run it is.
        expect(page.locator("#live .compare-caption")).to_have_text(
            f"D's learning rate 0.002 (run {earlier.name}, step {SEEDED_STEP})")
        expect(page.locator("#live .own-caption")).to_have_text(f"D's learning rate 0.003 (this run, step {SEEDED_STEP})")
        expect(page.locator("#live .live-compare-note")).to_contain_text(
            f"Beside run {earlier.name} (right grid, dashed lines): D's learning rate 0.003 here, 0.002 there.")
        losses = page.locator("#live svg[data-chart='losses']")
        expect(losses.locator("polyline.compare-line")).to_have_count(2)
        expect(page.locator("#live .live-chart:has(svg[data-chart='losses']) .compare-legend")).to_have_text(
            f"dashed: run {earlier.name}")
    # The live run alone again, on every page.
    picker.click()
    host.get_by_role("option", name="The live run alone").click()
    host.get_by_role("button", name="Show side by side", exact=True).click()
    for page in pages.values():
        expect(page.locator("#live .live-compare")).to_be_hidden(timeout=30_000)
        expect(page.locator("#live .own-caption")).to_be_hidden()
        expect(page.locator("#live svg[data-chart='losses'] polyline.compare-line")).to_have_count(0)


# ---- one run, trained for real ------------------------------------------------------------------

def shown_run(page) -> str:
    """The run whose grid the live panel shows ("" before any grid): its grid URLs are live/grid/RUN/STEP."""
    grid = page.locator("#live .live").get_attribute("data-grid") or ""
    return grid.split("/")[-2] if grid.count("/") >= 2 else ""


def wait_for_new_run(page, old_run: str) -> None:
    """Until the live panel shows a grid of a run other than old_run (the module's earlier runs)."""
    page.wait_for_function(
        "old => { const g = document.querySelector('#live .live').dataset.grid || '';"
        " return g.includes('live/grid/') && g.split('/').slice(-2)[0] !== old; }", arg=old_run, timeout=240_000)


def panel_state(page) -> dict:
    panel = page.locator("#live .live")
    return {"version": int(panel.get_attribute("data-version") or 0),
            "points": int(panel.get_attribute("data-points") or 0),
            "grid": panel.get_attribute("data-grid") or "", "state": panel.get_attribute("data-state") or ""}


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
    return page.locator("#live .live-grid img.fakes").bounding_box()


def blue_share(png: bytes) -> float:
    """The share of an element's screenshot that is the page's blue (a ticked box's fill)."""
    with Image.open(io.BytesIO(png)) as image:
        pixels = np.asarray(image.convert("RGB")).astype(int)
    return float(((pixels[..., 2] - pixels[..., 0] > 80) & (pixels[..., 2] > 150)).mean())


def debiased_ema(values: list[float], weight: float) -> float:
    """live.js's smoothing: a trailing moving average, debiased at the start (its last point)."""
    num = den = 0.0
    for value in values:
        num, den = weight * num + (1 - weight) * value, weight * den + (1 - weight)
    return num / den


def check_the_charts_and_diagnostics(page, name: str, run_path: str, stopped: int) -> None:
    """The walk's live-panel findings, on one screen, on a stopped run (nothing moves)."""
    from playwright.sync_api import expect
    # The log-scale box shows whether it is ticked (Gradio's page had styled the boxes away).
    box = page.locator("#live .live-log")
    box.scroll_into_view_if_needed()
    assert not box.is_checked()
    unticked = blue_share(box.screenshot())
    box.check()
    box.evaluate("e => e.blur()")   # no focus ring: the box alone shows the difference
    ticked = blue_share(box.screenshot())
    assert ticked > 0.3 > unticked, (name, ticked, unticked)
    expect(page.locator("#live svg[data-chart='losses'] .axis-name").last).to_contain_text("(log)")
    box.uncheck()

    # The legend's number is the newest reading, with where the bold (smoothed) line ends named beside it.
    events = [json.loads(line) for line in open(os.path.join(run_path, "events.jsonl"))]
    loss_d = [round(e["loss_d"], 5) for e in events if "loss_d" in e and not e.get("stepped")]
    item = page.locator("#live .live-chart:has(svg[data-chart='losses']) .legend-item", has_text="D loss")
    weight = float(page.locator("#live .live-smoothing").input_value())
    assert weight > 0 and len(loss_d) > 1, (weight, loss_d)
    shown = float(item.locator(".shown").inner_text())
    ends = float(re.fullmatch(r"\(line smoothed: (\S+)\)", item.locator(".smoothed").inner_text()).group(1))
    assert abs(ends - debiased_ema(loss_d, weight)) < 2e-3 and abs(shown - loss_d[-1]) < 2e-3, (name, shown, ends, loss_d)
    page.locator("#live .live-smoothing").fill("0")   # no smoothing: the line and its number are the raw values
    expect(item.locator(".smoothed")).to_have_count(0)
    assert abs(float(item.locator(".shown").inner_text()) - loss_d[-1]) < 2e-3, name

    # The step axis has round-number ticks between the first and last step, apart and inside the chart.
    ticks = page.locator("#live svg[data-chart='losses'] text.x-tick")
    steps = [int(t) for t in ticks.all_text_contents()]
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    assert len(steps) >= 3 and len(gaps) == 1 and 1 <= steps[0] and steps[-1] <= stopped, (name, steps)
    assert re.fullmatch(r"[125]0*", str(gaps.pop())), (name, steps)
    boxes, chart = [t.bounding_box() for t in ticks.all()], page.locator("#live svg[data-chart='losses']").bounding_box()
    assert all(a["x"] + a["width"] < b["x"] for a, b in zip(boxes, boxes[1:])), (name, boxes)
    assert chart["x"] <= boxes[0]["x"] and boxes[-1]["x"] + boxes[-1]["width"] <= chart["x"] + chart["width"], name

    # Readable from the back of a room: the ticks as drawn (their font times the chart's scale) at least
    # 14 px on a projector and 11 on a phone; on a projector the status and the legends 24 px.
    drawn = page.evaluate("""() => [...document.querySelectorAll('#live svg[data-chart] text.tick')].map(t => {
        const svg = t.ownerSVGElement;
        return parseFloat(getComputedStyle(t).fontSize) * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width; })""")
    assert drawn and min(drawn) >= (11 if name == "phone" else 14), (name, min(drawn))
    if name == "projector":
        sizes = page.evaluate("""() => ['.live-status', '.live-chart .legend'].map(
            s => parseFloat(getComputedStyle(document.querySelector('#live ' + s)).fontSize))""")
        assert min(sizes) >= 24, sizes

    # The diagnostics in words: no field names, and "1 device" beside "CPU (N cores)" explained.
    page.locator("#live .live-diagnostics summary").click()
    rows = dict(tuple(row.locator("td").all_inner_texts()) for row in page.locator("#live .live-diagnostics tr").all())
    assert rows["Trains on"].startswith("CPU (") and "1 device: the CPU" in rows["Devices"], (name, rows)
    assert re.search(r"\bcores?\b", rows["Devices"]), (name, rows)
    for what, value in rows.items():
        assert not re.search(r"[a-z]_[a-z]", what + " " + value), (name, what, value)


def test_one_run_started_watched_paused_stepped_stopped_and_resumed_to_its_end(app, person, tmp_path):
    from playwright.sync_api import expect
    bad_zip = tmp_path / "photos.zip"
    bad_zip.write_bytes(b"this is not a zip file")
    host = person(**HOST_SCREEN)
    projector = person(**PROJECTOR)   # a page on the room's projector, without the host key
    phone = person(**PHONE)           # a student's phone, on the students' view
    for page in (host, projector):
        page.goto(app.url)
    phone.goto(app.url + "?view=watch")
    screens = {"host": host, "projector": projector, "phone": phone}
    viewers = [host, projector, phone]
    for page in viewers:
        expect(page.locator("#live .live[data-version]")).to_have_count(1, timeout=60_000)
    earlier = shown_run(host)   # the seeded run
    type_the_host_key(host)
    # The host's page tells the upload route it is the host's (its uploads have a share of their own).
    host.wait_for_function(f"document.cookie.includes('blink-host-key={HOST_KEY}')", timeout=30_000)
    # The seeded run has finished: only Resume can act, and the others look it.
    cannot = lambda page: page.evaluate("[...document.querySelectorAll('#blink-controls .blink-cannot')].map(b => b.id)")
    expect(host.locator("#blink-resume")).not_to_have_class(re.compile("blink-cannot"))
    assert sorted(cannot(host)) == ["blink-pause", "blink-step", "blink-step-10", "blink-stop"], cannot(host)

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
    host.get_by_text("Advanced: labels; augmentation; how often to log, draw a grid and save").click()
    log_every = host.get_by_label("Log every (steps)")
    log_every.fill(str(LOG_EVERY))
    log_every.press("Tab")
    stats_before = live_stats(app)
    host.get_by_role("button", name="Start", exact=True).click()

    # The grid is the big thing on every screen, in view without scrolling; the form folds.
    early = []
    for page in viewers:
        wait_for_new_run(page, earlier)
        early.append(panel_state(page))
    page_width = {name: SCREENS[name]["viewport"]["width"] for name in screens}
    for name, page, least in (("host", host, 560), ("projector", projector, 480), ("phone", phone, 300)):
        page.wait_for_function("document.querySelector('#live .live-grid img.fakes').naturalWidth > 0")
        box, viewport = grid_box(page), page.viewport_size
        assert box["width"] >= least, (name, box)
        assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"], (name, box, viewport)
        assert page.evaluate("document.documentElement.scrollWidth") <= page_width[name]
        charts = page.locator("#live svg[data-chart]").all()
        assert all(box["width"] * box["height"] > c.bounding_box()["width"] * c.bounding_box()["height"]
                   for c in charts), name
    expect(host.get_by_label("Dataset", exact=True)).to_be_hidden()
    host.screenshot(path=str(tmp_path / "training.png"))
    # The student's phone view: no form, the grid first.
    assert phone.get_by_role("button", name="Start", exact=True).is_hidden()
    status_box = phone.locator("#live .live-status").bounding_box()
    assert grid_box(phone)["y"] < status_box["y"], (grid_box(phone), status_box)

    # (the status comes at log steps, every 1000; the early grids, every 10 steps, show the run moving)
    host.wait_for_function("/[/]([2-9]\\d|\\d{3,})$/.test(document.querySelector('#live .live').dataset.grid)",
                           timeout=240_000)
    # Pause, then Step: one generator update, the grid before it shown under the new one, both framed.
    assert sorted(cannot(host)) == ["blink-resume", "blink-step", "blink-step-10"], cannot(host)   # training
    host.get_by_role("button", name="Pause", exact=True).click()
    expect(host.locator("#live .live[data-state='paused']")).to_have_count(1, timeout=120_000)
    # "Pausing..." goes once the run is paused: the status line says so.
    expect(host.locator("#blink-message")).to_be_hidden()
    paused_at = int(host.locator("#live .live").get_attribute("data-step"))
    # While paused, D's learning rate changed for the next update: said, then marked on the charts.
    host.get_by_text("Change while training", exact=True).click()
    host.get_by_label("D's learning rate", exact=True).fill("0.001")
    host.get_by_role("button", name="Apply from the next step", exact=True).click()
    expect(host.locator("#blink-message")).to_contain_text("Changing D's learning rate 0.001 from the next step", timeout=30_000)
    host.get_by_role("button", name="Step", exact=True).click()
    expect(host.locator("#live .live-before .before-step")).to_have_text(str(paused_at), timeout=60_000)
    expect(host.locator("#live .live")).to_have_attribute("data-step", str(paused_at + 1))
    expect(host.locator("#blink-message")).to_be_hidden()   # "Stepping 1 generator update..." too, once stepped
    # The stepped update is a marker off the loss lines (D's and G's), not a point joined into them.
    expect(host.locator("#live svg[data-chart='losses'] circle.stepped")).to_have_count(2, timeout=30_000)
    for page in viewers:   # the change, where it took effect, on every page's loss chart
        expect(page.locator("#live svg[data-chart='losses'] .settings-mark")).to_have_count(1, timeout=30_000)
        expect(page.locator("#live svg[data-chart='losses'] .mark-label")).to_have_text("D's learning rate 0.001")
    expect(phone.locator("#live .live-before .verdict")).to_have_count(60, timeout=30_000)
    # Every page's plots changed while the run trained, pushed to it (the Pause's and the Step's
    # points: a request heard between log steps makes its step one).
    for page, before in zip(viewers, early):
        page.wait_for_function(f"document.querySelector('#live .live').dataset.points > {before['points']}",
                               timeout=60_000)

    # Stop mid-run: heard between log steps, with the final grid at that step. It says "stopping..."
    # on the click itself: read in the same script as the click, before any answer from the server
    # can have come.
    said = host.evaluate("() => { document.querySelector('#blink-stop').click();"
                         " return document.querySelector('#live .live-status b').textContent; }")
    assert said == "stopping...", said
    expect(host.locator("#blink-message")).to_contain_text("Stopping", timeout=30_000)
    for page in viewers:
        expect(page.locator("#live .live[data-state='stopped']")).to_have_count(1, timeout=120_000)
    panel = host.locator("#live .live")
    stopped = int(panel.get_attribute("data-step"))
    assert 0 < stopped < LOG_EVERY, stopped          # not at a log step: between them
    assert panel.get_attribute("data-grid").endswith(f"/{stopped}")
    run = os.path.join(app.runs_root, shown_run(host))
    for name, page in screens.items():
        check_the_charts_and_diagnostics(page, name, run, stopped)

    # A Stop is not the end of the lesson: every page stays on the grid (only a finished run moves
    # them to Sample).
    host.wait_for_timeout(2000)   # time for a tab switch to happen, were it to
    for page in viewers:
        expect(page.get_by_role("tab", name="Train")).to_have_attribute("aria-selected", "true")

    # What D believes, on every screen: a frame on each of the 60 fakes (10 digits, 6 rows) and on
    # the 60 real digits beside them, coloured by D's verdict, with no number drawn over a digit;
    # the legend says what the colours mean and D's mean verdict on each grid, and a tap on an
    # image says its own verdict, at a size a phone reads (11 px or more).
    for name, page in screens.items():
        fakes = page.locator("#live .live-grid .tiles:has(img.fakes) .verdict")
        reals = page.locator("#live .live-real .verdict")
        expect(fakes).to_have_count(60, timeout=30_000)
        expect(reals).to_have_count(60)
        values = [float(v) for v in fakes.evaluate_all("frames => frames.map(f => f.dataset.value)")
                  + reals.evaluate_all("frames => frames.map(f => f.dataset.value)")]
        assert all(0 <= v <= 1 for v in values), values
        assert not "".join(fakes.all_inner_texts() + reals.all_inner_texts()), "a number is drawn over a digit"
        legend = page.locator("#live .verdict-legend")
        # The CPU's default type compares pairs (core/gans.py): its verdict is still a probability.
        expect(legend).to_contain_text("the probability that D takes it for the real one")
        expect(legend).to_contain_text(re.compile(r"On average D gives these fakes \d\.\d\d and the real images \d\.\d\d"))
        seventh = reals.nth(6)
        seventh.scroll_into_view_if_needed()
        box = seventh.bounding_box()
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        readout = page.locator("#live .verdict-readout")
        said = "fake" if "fake" in seventh.get_attribute("class") else "real"
        value = seventh.get_attribute("data-value")
        expect(readout).to_have_text(re.compile(rf"Real image, row 1, column 7 \(the grid at step {stopped}\): "
                                                rf"D's verdict {re.escape(value)}, so D says {said}\."))
        assert float(readout.evaluate("e => getComputedStyle(e).fontSize")[:-2]) >= (11 if name == "phone" else 14)
    frame, tile = host.locator("#live .live-real .verdict").first.bounding_box(), grid_box(host)
    assert frame["width"] > 0.8 * tile["width"] / 10 - 4, (frame, tile)   # a tile's frame, not a dot
    host.get_by_label("D's verdicts").uncheck()
    expect(host.locator("#live .verdict")).to_have_count(0)
    host.get_by_label("D's verdicts").check()

    # The student's phone explains the run: "What are G and D?" opens the folded primer at the
    # losses of this run's GAN type (the CPU's default, the relativistic pairing), not the others'.
    primer = phone.locator("#live .live-primer")
    assert primer.get_attribute("open") is None
    phone.get_by_role("link", name="What are G and D?").click()
    expect(primer).to_have_attribute("open", "")
    expect(primer).to_contain_text("G, the generator,")
    expect(primer.locator(".primer-gan[data-gan='rpgan']")).to_contain_text("softplus(-(D(x) - D(G(z))))")
    expect(primer.locator(".primer-gan[data-gan='rpgan']")).to_be_visible()
    for other in ("dcgan", "wgan-gp", "hinge"):
        expect(primer.locator(f".primer-gan[data-gan='{other}']")).to_be_hidden()

    # The host opens Sample, whose caption names the generator it shows: the live run's, saved at
    # the stopped step.
    host.get_by_role("tab", name="Sample").click()
    expect(host.locator("#sample-caption")).to_contain_text(f"at step {stopped}", timeout=60_000)

    # Resumed from the Train tab for a few steps more, the run ends: the host lands on Sample with
    # fresh samples from the run's final generator.
    host.get_by_role("tab", name="Train").click()
    end = stopped + RESUMED_STEPS
    resume_to = host.get_by_label("Resume to step (0: the run's own length)")
    resume_to.fill(str(end))
    resume_to.press("Tab")
    host.get_by_role("button", name="Resume", exact=True).click()
    expect(host.get_by_role("tab", name="Sample")).to_have_attribute("aria-selected", "true", timeout=400_000)
    expect(host.locator("#sample-caption")).to_contain_text(f"at step {end}", timeout=30_000)
    host.get_by_role("tab", name="Train").click()
    for page, before in zip(viewers, early):
        final = panel_state(page)
        assert final["state"] == "done" and final["grid"] != before["grid"], (before, final)
    # The tile tapped before the Resume is read again from the newest grid: the readout says that grid.
    expect(projector.locator("#live .verdict-readout")).to_contain_text(f"(the grid at step {end}):", timeout=30_000)
    expect(host.locator("#live .live-status")).to_contain_text("done")
    # What is happening, in words, on every screen (core/phase.py): the samples' stage at the end.
    for page in viewers:
        expect(page.locator("#live .live-status")).to_contain_text(re.compile(r"Now: (blobs|strokes|digits): "))

    # One rendering per change for everyone: the watcher rendered each snapshot once and sent
    # it to each of the 3 pages (messages), so renders do not grow with the number of viewers.
    stats = live_stats(app)
    renders = stats["renders"] - stats_before["renders"]
    messages = stats["messages_sent"] - stats_before["messages_sent"]
    writes = (len(open(os.path.join(run, "events.jsonl")).readlines())
              + len([n for n in os.listdir(os.path.join(run, "grids")) if n.startswith("step_") and n.endswith(".png")]))
    assert stats["viewers"] == len(viewers), stats
    assert renders <= writes + 10, (renders, writes)   # status-only changes: a few
    assert messages >= len(viewers) * (renders - 2), (renders, messages)
    if os.environ.get("BLINK_SCREENSHOT"):
        host.screenshot(path=os.environ["BLINK_SCREENSHOT"], full_page=True)

    # Ask for a digit (of the shipped generator: this short run draws no digits yet).
    host.get_by_role("tab", name="Sample").click()
    host.get_by_label("Or pick a generator").click()
    host.get_by_role("option", name="The shipped generator (pre-trained)").click()
    expect(host.locator("#sample-caption")).to_contain_text("the shipped generator", timeout=60_000)
    host.get_by_label("Class", exact=True).click()
    host.get_by_role("option", name="7", exact=True).click()
    expect(host.locator("#sample-caption")).to_contain_text("Every sample is class 7", timeout=60_000)
    source = host.locator("#sample-grid img").get_attribute("src")
    digits = grid_classes(host.request.get(source).body())
    assert len(digits) >= 10 and (digits == 7).mean() >= 0.8, digits
