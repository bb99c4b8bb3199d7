"""Class names with markup in them are text on every page (issue 45), in real chromium.

The server's current run is finished (APP_SETUP: the shipped generator saved as a run's, its ten
classes named, two of them with markup, and a status whose message and Diagnostics carry the names
as the trainer writes text), so nothing trains. Names reach the page from a host's generator upload
or a zip's folders; an <img> in one was drawn as an element in every follower's Sample captions.
"""

import pytest

from tests.apphelpers import needs_chromium, seed_finished_run

pytestmark = [pytest.mark.browser, pytest.mark.slow, needs_chromium]
STEP = 200
IMG, BOLD = "<img src=x id=pwn>", "<b id=bold>"
NAMES = [IMG, BOLD] + [f"digit {i}" for i in range(2, 10)]
MARKUP = "#pwn, #bold"          # the elements the names would make, were they drawn as HTML


def APP_SETUP(folder) -> None:
    run = seed_finished_run(str(folder / "runs"), NAMES, STEP, grid_steps=(STEP,), tiles=20)
    run.write_status("done", f"Finished. Classes {IMG} and {BOLD}.", step=STEP, steps=STEP, gan="dcgan",
                     classes=10, class_names=NAMES, diagnostics={"class_names": f"{IMG}, {BOLD}"})


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
    # The interpolation's class pickers too.
    page.get_by_label("Class A", exact=True).click()
    expect(page.get_by_role("option", name=IMG, exact=True)).to_be_visible()
    assert page.locator(MARKUP).count() == 0
