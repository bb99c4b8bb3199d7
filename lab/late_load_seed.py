"""Is what is typed into the Train tab's Seed box kept, when it is typed as Advanced opens? (lab/README.md)

Starts the real app, then N times in a fresh browser context: open the page, wait for the time
estimate, open Advanced, type "1.5" into Seed at once, leave the box, and read it ten times over
2 s. Prints each load's readings; a load that reads 0 lost what was typed.

    python lab/late_load_seed.py 10
    python lab/late_load_seed.py 10 --before-ms 3000   # wait before opening Advanced
    python lab/late_load_seed.py 10 --after-ms 1500    # wait after opening it, before typing
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.parts import CHROMIUM  # noqa: E402
from tests.apphelpers import BROWSER_ARGS, RunningApp  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("loads", type=int)
    parser.add_argument("--before-ms", type=float, default=0)
    parser.add_argument("--after-ms", type=float, default=0)
    args = parser.parse_args()
    from playwright.sync_api import expect, sync_playwright
    runs = os.path.join(tempfile.mkdtemp(prefix="late-load-"), "runs")
    os.makedirs(runs)
    app = RunningApp(runs).wait_ready()
    lost = 0
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            for load in range(args.loads):
                context = browser.new_context(viewport={"width": 1280, "height": 720})
                page = context.new_page()
                page.goto(app.url)
                expect(page.locator("#estimate")).to_contain_text(re.compile("About|Time estimate"), timeout=120_000)
                page.wait_for_timeout(args.before_ms)
                page.get_by_text("Advanced: labels; augmentation; how often to log, draw a grid and save").click()
                seed = page.locator("#blink-more").get_by_label("Seed", exact=True)
                page.wait_for_timeout(args.after_ms)
                seed.fill("1.5")
                seed.press("Tab")
                readings = []
                for _ in range(10):
                    page.wait_for_timeout(200)
                    readings.append(seed.input_value())
                lost += readings[-1] != "1.5"
                print(load, readings, flush=True)
                context.close()
            browser.close()
    finally:
        app.stop()
    print(f"lost what was typed in {lost} of {args.loads} loads")


if __name__ == "__main__":
    main()
