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
# that is never cleared: lab/README.md, "A page at rest still draws 60 frames a second"), so each
# page a test holds open costs chromium a steady share of a core. A page that only watches (a
# projector's, a phone's, while the host's page acts) gets its frames 10 times a second instead:
# what the tests read on it does not depend on the frame rate. Never a page that is clicked through
# menus: Playwright waits for an element to stop moving over two of its own frames, which a page
# whose animations step every 100 ms can fool (seen: a dropdown's option clicked mid-animation,
# then outside the viewport).
FEWER_FRAMES = ("window.requestAnimationFrame = callback => setTimeout(() => callback(performance.now()), 100);"
                "window.cancelAnimationFrame = id => clearTimeout(id);")


@pytest.fixture
def person(browser):
    """person(watching=False, **context options) -> a new page in a context of its own, closed after
    the test; watching=True for a page that only watches (FEWER_FRAMES)."""
    contexts = []

    def new_page(watching: bool = False, **options):
        contexts.append(browser.new_context(**options))
        if watching:
            contexts[-1].add_init_script(FEWER_FRAMES)
        return contexts[-1].new_page()
    yield new_page
    for context in contexts:
        context.close()
