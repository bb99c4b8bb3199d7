"""The browser tests' chromium (Debian's, with Playwright: one browser a test module) and its people:
a browser context each, since pages of one context share its connection limit per host."""
import pytest

from tests.apphelpers import BROWSER_ARGS, CHROMIUM


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield launched
        launched.close()


# A Gradio page asks for an animation frame 60 times a second even at rest (a status tracker's timer
# that is never cleared: lab/README.md, "A page at rest still draws 60 frames a second"), and each
# open page then costs chromium a steady share of a core, most of the browser tests' CPU. The tests'
# pages get their frames 10 times a second instead: what they check (text, layout, images, what a
# click does) does not depend on the frame rate, and their waits poll.
FEWER_FRAMES = ("window.requestAnimationFrame = callback => setTimeout(() => callback(performance.now()), 100);"
                "window.cancelAnimationFrame = id => clearTimeout(id);")


@pytest.fixture
def person(browser):
    """person(**context options) -> a new page in a context of its own, closed after the test."""
    contexts = []

    def new_page(**options):
        contexts.append(browser.new_context(**options))
        contexts[-1].add_init_script(FEWER_FRAMES)
        return contexts[-1].new_page()
    yield new_page
    for context in contexts:
        context.close()
