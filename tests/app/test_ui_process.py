"""The UI process (python app.py) never loads torch (issue 13: its memory): what needs torch runs in
the trainer and the viewer-work process. Checked from outside, as a host's `top` would see it: the
libraries mapped into the app's own process after a page load, a dataset preview and samples."""
import re

import pytest

from tests.apphelpers import BROWSER_ARGS, CHROMIUM, children_of, needs_chromium

pytestmark = pytest.mark.slow


def torch_loaded(pid: int) -> bool:
    """Whether torch's libraries are mapped into the process `pid`."""
    with open(f"/proc/{pid}/maps") as f:
        return "libtorch" in f.read()


def test_previews_and_samples_are_drawn_without_torch_in_the_ui_process(app):
    client = app.client()
    note, preview = client.predict("bundled-mnist", "", api_name="/preview_dataset")
    assert "always available" in note and preview
    grid, caption = client.predict(3, 16, "seed", api_name="/sample")
    assert "16 samples, seed 3" in caption and grid
    assert not torch_loaded(app.process.pid)
    # The check sees torch where it is: in the processes the app started (viewer work, the trainer).
    assert any(torch_loaded(pid) for pid in children_of(app.process.pid))


@pytest.mark.browser
@needs_chromium
def test_a_page_load_and_the_sample_tab_leave_the_ui_process_without_torch(app):
    from playwright.sync_api import expect, sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        page = browser.new_page()
        page.goto(app.url)
        # What the page's load events fill in: the time estimate (its preset chosen for this
        # device), the dataset's note and its real images (in an accordion, closed at first).
        expect(page.locator("#estimate")).to_contain_text(re.compile("About|Time estimate"), timeout=120_000)
        page.get_by_role("button", name="Dataset: upload your images").click()
        expect(page.locator("#dataset-note")).to_contain_text("always available", timeout=120_000)
        expect(page.locator("#dataset-preview img")).to_have_count(1, timeout=120_000)
        page.get_by_role("tab", name="Sample").click()
        expect(page.locator("#sample-caption")).to_contain_text("Generator:", timeout=120_000)
        browser.close()
    assert not torch_loaded(app.process.pid)
