"""How much a page at rest costs its browser: animation frames per second and chromium's CPU over
ten seconds, for a minimal Gradio page and for Blink's page on a finished run (nothing changing).

    python lab/idle_page_frames.py

Needs Debian's chromium and Playwright (as the browser tests do).
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.parts import CHROMIUM  # noqa: E402
from tests.apphelpers import BROWSER_ARGS, RunningApp, free_port, seed_finished_run, wait_for  # noqa: E402

COUNT_FRAMES = ("window.__frames = 0; const request = window.requestAnimationFrame.bind(window);"
                "window.requestAnimationFrame = cb => { window.__frames++; return request(cb); };")
MINIMAL = textwrap.dedent("""
    import sys, gradio as gr
    with gr.Blocks() as demo:
        gr.Markdown("hi")
        button, box = gr.Button("x"), gr.Textbox()
        button.click(lambda: "y", None, box)
    demo.launch(server_port=int(sys.argv[1]))
""")


def chromium_cpu() -> float:
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"chrom" in open(f"/proc/{pid}/cmdline", "rb").read():
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def answers(url: str) -> bool:
    import urllib.request
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:      # not listening yet
        return False


def at_rest(browser, url: str, seconds: float = 10) -> tuple[float, float]:
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.add_init_script(COUNT_FRAMES)
    page.goto(url)
    time.sleep(10)      # the page's own load events are over
    frames, cpu = page.evaluate("window.__frames"), chromium_cpu()
    time.sleep(seconds)
    result = (page.evaluate("window.__frames") - frames) / seconds, (chromium_cpu() - cpu) / seconds
    context.close()
    return result


def main() -> None:
    from playwright.sync_api import sync_playwright
    port = free_port()
    minimal = subprocess.Popen([sys.executable, "-c", MINIMAL, str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    runs = tempfile.mkdtemp()
    run = seed_finished_run(runs, [str(i) for i in range(10)], 200, (100, 200), 60)
    with open(os.path.join(run.path, "status.json"), "w") as f:
        f.write('{"state": "done", "step": 200, "steps": 200}')
    app = RunningApp(runs).wait_ready()
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/"), 60, what="the minimal page")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            for name, url in (("about:blank", "about:blank"), ("minimal Gradio page", f"http://127.0.0.1:{port}/"),
                              ("Blink, a finished run", app.url)):
                frames, cpu = at_rest(browser, url)
                print(f"{name:24s} {frames:5.1f} frames/s   chromium {100 * cpu:4.1f}% of a core")
            browser.close()
    finally:
        minimal.kill()
        app.stop()


if __name__ == "__main__":
    main()
