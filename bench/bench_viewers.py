"""What does a room of viewers cost the server and the trainer?

Starts the real app (`python app.py`, private runs folder) and one default training run (bundled
MNIST, batch 128, the page's defaults), then for each viewer count opens that many viewers in a
separate client process and measures, over a window:

- the UI process's own CPU time (/proc/<pid>/stat, utime + stime), in ms per second, and per viewer
  after subtracting the 0-viewer figure measured in the same run;
- the trainer's steps/s, as a ratio of the 0-viewer speed. Scripted clients run at idle priority
  (an idle cpu cgroup where one can be made, else SCHED_IDLE), so they only get CPU the trainer
  and the server leave free: what remains is the server's own cost. Browser pages cannot (see
  client_main): their ratio includes the browsers' own CPU on this machine;
- for scripted viewers, how late each viewer sees each new loss point and grid (p95), measured
  against the status's write time and the grid file's mtime.

Viewer kinds:
    sse      scripted clients of /live/events (what every page does)
    status   scripts that wait on /live/status?since=V
    gradio   gradio_client scripts asking /status once a second (the old way, for comparison)
    browser  headless chromium pages (one browser context each) on ?view=watch

    python bench/bench_viewers.py --kind sse --counts 0 10 30 50 --window 60
    python bench/bench_viewers.py --kind browser --counts 0 10 30 50 --window 60
    python bench/bench_viewers.py --kind browser --replay --counts 0 10 30 50 --window 45
        # the run's writes replayed at the default run's pace: pages cannot slow the changes
    python bench/bench_viewers.py --idle 30                  # the server with no page and no run
    python bench/bench_viewers.py --kind sse --soak 600 --counts 50   # memory and errors over 10 min
    BLINK_BENCH_CLIENTS=normal python bench/bench_viewers.py --kind sse --soak 600 --counts 50
        # the same with the clients at normal priority: their lateness is then a viewer's, not a
        # starved idle process's (the trainer ratio then includes the clients' own CPU)
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- the client process --------------------------------------------------------------------
CLIENT_CGROUP = "/sys/fs/cgroup/cpu/blink-bench-clients"


def deprioritise_clients() -> str:
    """Give this process and its children (browsers too) only CPU that nobody else wants.

    A cpu cgroup marked idle holds whatever a process does to its own priority (chromium renices
    its browser process to -8, seen with top); where cgroups are not writable, SCHED_IDLE is the
    fallback. Returns which one applied."""
    try:
        os.makedirs(CLIENT_CGROUP, exist_ok=True)
        with open(os.path.join(CLIENT_CGROUP, "cpu.shares"), "w") as f:
            f.write("2")
        if os.path.exists(os.path.join(CLIENT_CGROUP, "cpu.idle")):
            with open(os.path.join(CLIENT_CGROUP, "cpu.idle"), "w") as f:
                f.write("1")
        with open(os.path.join(CLIENT_CGROUP, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        return "cpu cgroup (idle)"
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        os.nice(19)
        return "nice 19"
def client_main(url: str, kind: str, count: int, runs_root: str, out: str) -> None:
    """Runs in its own process and writes latencies and errors to `out` on SIGTERM. Scripted
    clients run at idle priority. Browsers cannot: at idle priority beside a trainer that takes
    both cores they never even render (measured: a page's attribute unreadable for 30 s), so
    their rows give the server's own cost, and their trainer ratio includes the browsers' CPU."""
    from core.rundir import RunDir
    if kind != "browser" and os.environ.get("BLINK_BENCH_CLIENTS") != "normal":
        deprioritise_clients()
    stop, lock = threading.Event(), threading.Lock()
    result = {"status_latency": [], "grid_latency": [], "errors": [], "messages": 0}

    def record(message: dict, seen_grid: list) -> None:
        now = time.time()
        with lock:
            result["messages"] += 1
            if message.get("updated"):
                result["status_latency"].append(now - message["updated"])
            grid = message.get("grid")
            if grid and grid != seen_grid[0]:
                if seen_grid[0] is not None:
                    _, _, run, step = grid.split("/")
                    path = os.path.join(RunDir(os.path.join(runs_root, run)).grids_folder, RunDir.grid_name(int(step)))
                    result["grid_latency"].append(now - os.path.getmtime(path))
                seen_grid[0] = grid

    def sse_viewer() -> None:
        seen_grid = [None]
        try:
            with urllib.request.urlopen(url + "live/events", timeout=60) as stream:
                first = True
                for raw in stream:
                    if stop.is_set():
                        return
                    if raw.startswith(b"data: "):
                        message = json.loads(raw[6:])
                        if not first:   # the connect message is history, not a change
                            record(message, seen_grid)
                        else:
                            seen_grid[0] = message.get("grid")
                        first = False
        except Exception as exc:
            if not stop.is_set():
                result["errors"].append(repr(exc))

    def status_viewer() -> None:
        version, seen_grid = 0, [None]
        while not stop.is_set():
            try:
                with urllib.request.urlopen(f"{url}live/status?since={version}", timeout=60) as answer:
                    status = json.load(answer)
                if version:
                    record({"updated": status.get("updated"), "grid": None}, seen_grid)
                version = status["version"]
            except Exception as exc:
                if not stop.is_set():
                    result["errors"].append(repr(exc))
                    time.sleep(1)

    def gradio_viewer() -> None:
        from gradio_client import Client
        client = Client(url, verbose=False)
        while not stop.is_set():
            t0 = time.time()
            try:
                client.predict(api_name="/status")
            except Exception as exc:
                result["errors"].append(repr(exc))
            stop.wait(max(0.0, 1.0 - (time.time() - t0)))

    def browsers() -> None:
        from playwright.sync_api import sync_playwright
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            pages = []
            for _ in range(count):
                page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
                page.goto(url + "?view=watch")
                pages.append(page)
            for page in pages:   # loaded and connected: the window measures watching, not page loads
                page.wait_for_selector("#live .live[data-version]", timeout=600_000)
            open(out + ".ready", "w").close()
            while not stop.is_set():
                pages[0].wait_for_timeout(500)
            result["messages"] = sum(int(pg.locator("#live .live").get_attribute("data-version") or 0)
                                     for pg in pages)
            browser.close()

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if kind == "browser":
        thread = threading.Thread(target=browsers)
        thread.start()
        threads = [thread]
    else:
        target = {"sse": sse_viewer, "status": status_viewer, "gradio": gradio_viewer}[kind]
        threads = [threading.Thread(target=target, daemon=True) for _ in range(count)]
        for thread in threads:
            thread.start()
    if kind != "browser":
        open(out + ".ready", "w").close()
    while not stop.is_set():
        stop.wait(0.5)
    for thread in threads:
        thread.join(30 if kind == "browser" else 2)
    with lock, open(out, "w") as f:
        json.dump(result, f)
    os._exit(0)   # gradio_client's own threads (its stream readers) would keep the process alive


# ---- a replayed run: the trainer's writes without the trainer's CPU ------------------------------
REPLAY_STEPS_PER_S = 22.0    # the default CPU run on this machine (the 0-viewer rows above)


def replay_main(run_path: str) -> None:
    """Write into a run directory what the default run writes, at its rate: a status and a loss
    point every 25 steps, grids on the trainer's schedule, a quality point every 200 steps.

    With pages on the same two cores as a real trainer, the pages' own rendering slows the run
    and so the changes the server sends (bench/README.md); replayed, the writes keep their pace
    whatever the pages do, so the server's cost per page is that of watching a full-speed run."""
    import numpy as np
    from core.config import TrainConfig
    from core.rundir import RunDir
    from core.train import grid_due
    run, config, rng = RunDir(run_path), TrainConfig(steps=1_000_000), np.random.default_rng(0)
    started, step = time.time(), 0
    while True:
        step += 1
        time.sleep(max(0.0, started + step / REPLAY_STEPS_PER_S - time.time()))
        if grid_due(step, config):
            run.save_grid(rng.uniform(-1, 1, (60, 1, 28, 28)).astype(np.float32), step, columns=10)
        if step == 1 or step % config.log_every == 0:
            run.append_event({"step": step, "time": round(time.time() - started, 3),
                              **{k: float(rng.uniform(0.2, 1.5)) for k in ("loss_d", "loss_g", "d_real", "d_fake")}})
            run.write_status("running", "Training...", step=step, steps=config.steps, pid=os.getpid(), gan="dcgan",
                             device="CPU (2 cores)", device_kind="cpu", cores=1, preset="fast", classes=10,
                             steps_per_second=REPLAY_STEPS_PER_S, images_per_second=REPLAY_STEPS_PER_S * 128,
                             seconds_left=(config.steps - step) / REPLAY_STEPS_PER_S, elapsed=time.time() - started)
        if step % 200 == 0:
            run.append_event({"step": step, "time": round(time.time() - started, 3),
                              "quality_fd": float(rng.uniform(10, 100)), "quality_confident": 0.5})


# ---- the driver ----------------------------------------------------------------------------
def start_app(runs_root: str, port: int):
    env = {**os.environ, "BLINK_RUNS_DIR": runs_root, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    log = open(os.path.join(runs_root, "app.log"), "w")
    process = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(240):
        try:
            urllib.request.urlopen(url, timeout=2).read(10)
            return process, url
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the app did not start")


def status(url: str) -> dict:
    with urllib.request.urlopen(url + "live/status", timeout=30) as answer:
        return json.load(answer)


def window(app_pid: int, url: str, seconds: float) -> dict:
    s0, c0, t0, m0 = status(url).get("step", 0), cpu_seconds(app_pid), time.time(), rss_mb(app_pid)
    time.sleep(seconds)
    s1, c1, t1 = status(url).get("step", 0), cpu_seconds(app_pid), time.time()
    return {"server_ms_per_s": (c1 - c0) / (t1 - t0) * 1000, "steps_per_s": (s1 - s0) / (t1 - t0),
            "rss_start_mb": m0, "rss_mb": rss_mb(app_pid)}


def with_viewers(app_pid: int, url: str, runs_root: str, kind: str, count: int, seconds: float) -> dict:
    if count == 0:
        return {**window(app_pid, url, seconds), "viewers": 0}
    out = tempfile.mktemp(prefix="viewers-", suffix=".json")
    client = subprocess.Popen([sys.executable, __file__, "--client", url, kind, str(count), runs_root, out], cwd=ROOT)
    deadline = time.time() + 900
    while not os.path.exists(out + ".ready") and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(10 if kind != "browser" else 20)   # every viewer connected and settled
    row = {**window(app_pid, url, seconds), "viewers": count}
    client.send_signal(signal.SIGTERM)
    client.wait(120)
    with open(out) as f:
        result = json.load(f)
    row.update(errors=len(result["errors"]), first_error=(result["errors"] or [None])[0],
               messages=result["messages"], status_p95_s=percentile(result["status_latency"], 0.95),
               grid_p95_s=percentile(result["grid_latency"], 0.95))
    return row


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--replayer":
        replay_main(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("sse", "status", "gradio", "browser"), default="sse")
    parser.add_argument("--counts", type=int, nargs="+", default=[0, 10, 30, 50])
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--idle", type=float, default=0.0, help="only measure an idle server for this long")
    parser.add_argument("--soak", type=float, default=0.0, help="one long window at the last count")
    parser.add_argument("--port", type=int, default=7931)
    parser.add_argument("--replay", action="store_true",
                        help="no trainer: a replayer writes the default run's files at its pace (see replay_main)")
    args = parser.parse_args()
    runs_root = tempfile.mkdtemp(prefix="bench-viewers-")
    replayer = None
    if args.replay:   # the run exists before the app starts, so the app attaches to it as its current run
        from core import devices
        from core.config import TrainConfig
        from core.plan import plan_run
        from core.rundir import RunDir
        run = RunDir.create(plan_run(TrainConfig(steps=1_000_000), devices.probe("cpu")), runs_root)
        replayer = subprocess.Popen([sys.executable, __file__, "--replayer", run.path], cwd=ROOT)
        time.sleep(3)
    app, url = start_app(runs_root, args.port)
    try:
        time.sleep(15)   # the trainers' fork server finishes its imports
        if args.idle:
            row = window(app.pid, url, args.idle)
            print(f"idle server (no page, no run): {row['server_ms_per_s']:.1f} ms of CPU per s, "
                  f"RSS {row['rss_mb']:.0f} MB")
            return
        from gradio_client import Client
        if not args.replay:
            Client(url, verbose=False).predict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto",
                                               batch_size=128, precision="fp32", device="auto", steps=1_000_000,
                                               api_name="/start")
        while status(url).get("state") != "running":
            time.sleep(0.5)
        time.sleep(5)
        rows, base = [], None
        counts = args.counts if not args.soak else [0, args.counts[-1]]
        for count in counts:
            seconds = args.soak if args.soak and count else args.window
            row = with_viewers(app.pid, url, runs_root, args.kind, count, seconds)
            if count == 0 and base is None:
                base = row
            row["per_viewer_ms_per_s"] = ((row["server_ms_per_s"] - base["server_ms_per_s"]) / count
                                          if count else None)
            row["trainer_ratio"] = row["steps_per_s"] / base["steps_per_s"] if base["steps_per_s"] else None
            rows.append(row)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
        priority = "normal" if os.environ.get("BLINK_BENCH_CLIENTS") == "normal" else "idle"
        run_kind = "a replayed default run (no trainer)" if args.replay else "default run (batch 128, CPU)"
        print(f"\n{args.kind} viewers, {seconds:.0f} s windows, {run_kind}; scripted clients at "
              f"{priority} CPU priority, browsers at normal")
        print("| viewers | server ms/s | per viewer ms/s | trainer steps/s | ratio | loss p95 s | grid p95 s | "
              "errors | server RSS MB |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            cell = lambda v, f="{:.2f}": "-" if v is None else f.format(v)   # noqa: E731
            print(f"| {r['viewers']} | {r['server_ms_per_s']:.1f} | {cell(r['per_viewer_ms_per_s'])} | "
                  f"{r['steps_per_s']:.2f} | {cell(r['trainer_ratio'], '{:.3f}')} | {cell(r.get('status_p95_s'))} | "
                  f"{cell(r.get('grid_p95_s'))} | {r.get('errors', 0)} | {r['rss_mb']:.0f} |")
    finally:
        if replayer is not None:
            replayer.kill()
        app.send_signal(signal.SIGINT)
        try:
            app.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
