"""The browser tests' chromium (Debian's, with Playwright: one browser a test module) and its people:
a browser context each, since pages of one context share its connection limit per host."""
import pytest

from tests.apphelpers import BROWSER_ARGS
from tests.parts import CHROMIUM


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield launched
        launched.close()


# A Gradio page asks for an animation frame 60 times a second even at rest (a status tracker's timer
# that is never cleared: lab/README.md, "A page at rest still draws 60 frames a second"), so each
# page a test holds open costs chromium a steady share of a core, most of the browser tests' CPU.
# The tests' pages get frames 10 times a second while nobody touches them, and at the full rate for
# two seconds after each click, key or input: Playwright waits for an element to keep its place over
# two of its own frames before it clicks, which an accordion or a menu opening in 100 ms steps can
# fool (seen: a dropdown's option positioned while the accordion above it opened, then outside the
# viewport for good). What the tests read at rest does not depend on the frame rate.
FEWER_FRAMES_AT_REST = """(() => {
  const frame = window.requestAnimationFrame.bind(window), cancelFrame = window.cancelAnimationFrame.bind(window);
  let touched = -Infinity;
  for (const kind of ["pointerdown", "keydown", "input", "wheel"]) {
    window.addEventListener(kind, () => { touched = performance.now(); }, true);
  }
  window.requestAnimationFrame = callback => performance.now() - touched < 2000
    ? frame(callback) : -setTimeout(() => callback(performance.now()), 100);
  window.cancelAnimationFrame = id => id < 0 ? clearTimeout(-id) : cancelFrame(id);
})();"""


@pytest.fixture
def person(browser):
    """person(**context options) -> a new page in a context of its own, closed after the test."""
    contexts = []

    def new_page(**options):
        contexts.append(browser.new_context(**options))
        contexts[-1].add_init_script(FEWER_FRAMES_AT_REST)
        return contexts[-1].new_page()
    yield new_page
    for context in contexts:
        context.close()
