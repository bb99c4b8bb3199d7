"""A lesson at a projector's size: in chromium at 1280x720, the page's time estimate before Start
against the run's real time, for three settings, and, during the first run, where the live grid
sits and how large the text the back row reads is drawn.

    python bench/bench_lesson.py

Starts the real app (`python app.py`). For each setting, a first run through the named API
measures its speed on this machine (the estimate of settings no run has measured is a rough
one); then the host's page, opened with the settings in its address (as a shared link presets
the form), reads the estimate, presses Start and waits for the end. The estimate is of training
time "if nothing else keeps it busy": it is set against the run's own training seconds (its
status's elapsed) and against the wall time from the click to the end (the trainer's start and
its data load included).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.parts import CHROMIUM  # noqa: E402
from tests.apphelpers import BROWSER_ARGS, RunningApp, press_start, wait_for  # noqa: E402

# (GAN type, batch, steps): the default loss at the seed's batch, hinge at the form's default, WGAN-GP
# with its five critic updates a step.
SETTINGS = [("dcgan", 64, 400), ("hinge", 128, 200), ("wgan-gp", 32, 150)]
PROJECTOR = {"width": 1280, "height": 720}


def seconds_of(words: str) -> float:
    """views.duration's words ("1 min 05 s", "12 s", "1 h 02 min") as seconds."""
    parts = dict((unit, int(n)) for n, unit in re.findall(r"(\d+) (h|min|s)\b", words))
    return parts.get("h", 0) * 3600 + parts.get("min", 0) * 60 + parts.get("s", 0)


def measure_layout(page) -> dict:
    """While the run trains: the grid's top and bottom, and the drawn sizes of the status, the
    legends and the axis ticks (a tick's font times its chart's scale)."""
    page.wait_for_function("document.querySelector('#live .live-grid img.fakes').naturalWidth > 0", timeout=120_000)
    page.wait_for_function("document.querySelectorAll('#live svg[data-chart] text.tick').length > 0", timeout=120_000)
    grid = page.locator("#live .live-grid img.fakes").bounding_box()
    sizes = page.evaluate("""() => {
        const px = (s) => parseFloat(getComputedStyle(document.querySelector('#live ' + s)).fontSize);
        const ticks = [...document.querySelectorAll('#live svg[data-chart] text.tick')].map(t => {
            const svg = t.ownerSVGElement;
            return parseFloat(getComputedStyle(t).fontSize) * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width; });
        return {status: px('.live-status'), legend: px('.live-chart .legend'), ticks: Math.min(...ticks)}; }""")
    return {"grid_top": round(grid["y"]), "grid_bottom": round(grid["y"] + grid["height"]), **sizes}


def main() -> int:
    from playwright.sync_api import sync_playwright
    root = tempfile.mkdtemp(prefix="blink-bench-lesson-")
    app = RunningApp(root).wait_ready()
    rows, layout = [], None
    try:
        client = app.client()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            for gan, batch, steps in SETTINGS:
                form = dict(dataset="bundled-mnist", data_path="", gan=gan, preset="fast", batch_size=batch, precision="fp32",
                            device="cpu", steps=steps)
                press_start(client, **form)    # measures these settings' speed here
                wait_for(lambda: app.status()["state"] == "done", 600, what=f"the {gan} run that measures")
                page = browser.new_page(viewport=PROJECTOR)
                page.goto(app.url + f"?gan={gan}&preset=fast&batch_size={batch}&steps={steps}&device=cpu")
                estimate = page.locator("#estimate")
                estimate.filter(has_text="measured on this server").wait_for(timeout=120_000)
                said = re.search(r"About (.+?) for", estimate.inner_text()).group(1)
                first = app.status()["run"]
                clicked = time.perf_counter()
                page.get_by_role("button", name="Start", exact=True).click()
                wait_for(lambda: app.status()["run"] != first, 60, interval=0.1, what="the page's run")
                if layout is None:
                    layout = measure_layout(page)
                done = wait_for(lambda: (s := app.status())["state"] == "done" and s, 600, interval=0.2,
                                what=f"the {gan} run")
                wall = time.perf_counter() - clicked
                rows.append({"gan": gan, "batch": batch, "steps": steps, "estimate": said,
                             "estimated_s": seconds_of(said), "training_s": round(done["elapsed"], 1),
                             "wall_s": round(wall, 1)})
                page.close()
            browser.close()
    finally:
        app.stop()
    print(json.dumps({"layout": layout, "runs": rows}, indent=1))
    print("\n| settings | estimate before Start | training time | estimate / training | click to end |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['gan']}, batch {r['batch']}, {r['steps']} steps | {r['estimate']} | {r['training_s']:.0f} s | "
              f"{r['estimated_s'] / r['training_s']:.2f} | {r['wall_s']:.0f} s |")
    print(f"\nAt 1280x720 during the run: the grid from y = {layout['grid_top']} to {layout['grid_bottom']}; "
          f"status {layout['status']:.1f} px, legends {layout['legend']:.1f} px, axis ticks at least {layout['ticks']:.1f} px.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
