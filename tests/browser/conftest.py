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


@pytest.fixture
def person(browser):
    """person(**context options) -> a new page in a context of its own, closed after the test."""
    contexts = []

    def new_page(**options):
        contexts.append(browser.new_context(**options))
        return contexts[-1].new_page()
    yield new_page
    for context in contexts:
        context.close()
