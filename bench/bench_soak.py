"""Soak (issue 13): an hour of viewer actions, compressed, against a live run.

Starts the real app (`python app.py`) with a private runs folder, dataset cache, Gradio upload
folder and temp folder (so every byte it writes is counted here and nothing else's is), presses
Start through the named API with a run sized to outlast the soak, measures a 20 s window with no
viewer, then runs --workers threads in ONE separate client process that loop, without pause,
over a weighted mix of what a room does on the page: dataset uploads (a distinct small zip each
time, plus hostile ones: not a zip, too many entries), previews, samples and their zip, strips
and GIFs, the explorer, nearest neighbours, the timelapse, grids by step, the generator download.
Endpoints are read live from the app (`view_api`); an action whose endpoint or arguments are
gone is skipped and said, not failed.

Meanwhile the driver samples every second: RSS of the UI process and of the trainer, disk used
by the uploads folder, the Sample tab's output folders, Gradio's upload folder and the runs
folder, and the time of a gradio_client /status call and of a GET /live/status. At the end it
prints one JSON line (appended to --report too) and a table: actions, refusals and errors per
kind, RSS peak and end, disk peaks against the caps the code defines, /status p50/p95/max, the
run's state, and the trainer's steps/s (from its own log) against 20 s windows with no viewer
before the soak and after it: a CPU run's speed drifts by several percent over a minute by itself.

    python bench/bench_soak.py                           # 10 minutes, 8 workers
    python bench/bench_soak.py --seconds 3600 --workers 16 --report soak.jsonl
    python bench/bench_soak.py --seconds 60 --workers 20 --think 8 --burst 20   # then 20 ask for one sample at once

Clients run at idle CPU priority as in bench_viewers.py (BLINK_BENCH_CLIENTS=normal: normal),
so the trainer's ratio measures the server's cost, not the clients' own.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_viewers import cpu_seconds, deprioritise_clients, percentile, rss_mb, status  # noqa: E402
from tests.apphelpers import RunningApp, children_of  # noqa: E402

BASELINE_SECONDS = 20
# Steps per second no CPU run here reaches (the bare loop does 12-16 on the quiet 2-core host):
# a run sized with it outlasts the soak, so the trainer is measured under load until the end.
RATE_CEILING = 20
STATUS_P95_TARGET_S = 0.5
RSS_TARGET_MB = 1024

# How often a room does each thing, relative to the others (an hour of a class, compressed).
ACTIONS = {"sample": 20, "grid_at": 12, "explore": 12, "interpolate": 10, "upload_dataset": 8,
           "preview_dataset": 8, "download_samples": 6, "neighbours": 6, "interpolation_gif": 5,
           "timelapse": 4, "download_generator": 3, "upload_not_a_zip": 1, "upload_too_many_entries": 1}
HOSTILE = {"upload_not_a_zip", "upload_too_many_entries"}   # a refusal with a message is the right answer
BUSY = "The sampler is busy"   # app/viewer_work.py's refusal when too many requests wait


# ---- the client process --------------------------------------------------------------------
class Skip(Exception):
    """The live app has no such endpoint, or it needs an argument this bench does not know."""


def burn(ms_per_s: float, stop: threading.Event) -> None:
    """Spend about ms_per_s of CPU each second, in 10 ms slices, until stop: a stand-in for the
    clients' own CPU with no request sent, to tell what they cost the trainer from what the server does."""
    while not stop.is_set():
        slice_started, busy_until = time.monotonic(), time.process_time() + ms_per_s / 100_000
        while time.process_time() < busy_until:
            pass
        stop.wait(max(0.01 - (time.monotonic() - slice_started), 0.0))


def client_main(url: str, workers: int, out: str, max_entries: int, think: float, burn_ms: float = 0.0) -> None:
    """Runs in its own process; writes per-kind counts, latencies and messages to `out` on SIGTERM."""
    if os.environ.get("BLINK_BENCH_CLIENTS") != "normal":
        deprioritise_clients()
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError
    from PIL import Image

    stop, lock = threading.Event(), threading.Lock()
    scratch = tempfile.mkdtemp(prefix="soak-client-")
    api = {name: ep["parameters"] for name, ep in
           Client(url, verbose=False).view_api(return_format="dict", print_info=False)["named_endpoints"].items()}
    result = {kind: {"done": 0, "refused": 0, "busy": 0, "errors": 0, "seconds": [], "messages": []}
              for kind in ACTIONS}
    skipped: dict[str, str] = {}
    hostile_files: dict[str, str] = {}

    def distinct_zip() -> str:
        """Six 48x48 noise PNGs: new content each time, so each upload is a new zip to keep."""
        path = tempfile.mktemp(suffix=".zip", dir=scratch)
        with zipfile.ZipFile(path, "w") as z:
            for i in range(6):
                png = io.BytesIO()
                Image.frombytes("RGB", (48, 48), os.urandom(48 * 48 * 3)).save(png, "PNG")
                z.writestr(f"img{i}.png", png.getvalue())
        return path

    def hostile(kind: str) -> str:
        with lock:
            if kind not in hostile_files:
                path = os.path.join(scratch, f"{kind}.zip")
                if kind == "upload_not_a_zip":
                    with open(path, "wb") as f:
                        f.write(os.urandom(4096))
                else:   # one entry more than a zip may hold: refused before any is read
                    with zipfile.ZipFile(path, "w") as z:
                        for i in range(max_entries + 1):
                            z.writestr(f"e{i}.txt", b"")
                hostile_files[kind] = path
            return hostile_files[kind]

    def arguments(kind: str, rng: random.Random, mine: dict) -> tuple[str, dict]:
        seed = rng.randrange(10**6)
        if kind.startswith("upload"):
            path = distinct_zip() if kind == "upload_dataset" else hostile(kind)
            return "/upload_dataset", {"path": handle_file(path)}
        if kind == "preview_dataset":
            return "/preview_dataset", ({"dataset": "folder", "data_path": mine["upload"]} if mine.get("upload")
                                        else {"dataset": "bundled-mnist", "data_path": ""})
        if kind in ("sample", "download_samples"):
            return f"/{kind}", {"seed": seed, "count": rng.choice((9, 16, 64, 256))}
        if kind in ("interpolate", "interpolation_gif"):
            return f"/{kind}", {"seed_a": seed, "seed_b": seed + 1, "steps": rng.choice((8, 10, 16, 32)),
                                "mode": rng.choice(("linear", "spherical"))}
        if kind in ("explore", "neighbours"):
            return f"/{kind}", {"seed": seed, "psi": rng.uniform(0.5, 1.0), "k": rng.randint(1, 16)}
        if kind == "grid_at":   # the slider's range is what this viewer's last timelapse set (0..1 before)
            return "/grid_at", {"step": rng.randint(0, int(mine.get("newest_step", 1)))}
        return f"/{kind}", {}

    def call(client, endpoint: str, wanted: dict, rng: random.Random):
        params = api.get(endpoint)
        if params is None:
            raise Skip(f"no {endpoint} endpoint")
        given = {}
        for p in params:
            name = p["parameter_name"]
            if name in wanted:
                given[name] = wanted[name]
            elif name.startswith("param_"):        # unnamed sliders: the explorer's directions
                given[name] = rng.uniform(-3, 3)
            elif not p.get("parameter_has_default"):
                raise Skip(f"{endpoint} needs {name}")
        return client.predict(**given, api_name=endpoint)

    def refusal(answer) -> str | None:
        """The warning the page shows instead of raising (e.g. a refused upload's note)."""
        for value in answer if isinstance(answer, (list, tuple)) else [answer]:
            if isinstance(value, str) and value.startswith("⚠️"):
                return value
        return None

    def worker(index: int, client: Client) -> None:
        rng, mine = random.Random(index), {}
        while not stop.is_set():
            if think:   # a student looks at what came back before the next click
                stop.wait(rng.expovariate(1 / think))
            kinds = [k for k in ACTIONS if k not in skipped]
            if not kinds:
                return
            kind = rng.choices(kinds, [ACTIONS[k] for k in kinds])[0]
            t0 = time.time()
            message = None
            try:
                endpoint, wanted = arguments(kind, rng, mine)
                answer = call(client, endpoint, wanted, rng)
                message = refusal(answer)
                if kind == "upload_dataset" and message is None:
                    mine["upload"] = answer[1]     # the kept zip: what this viewer previews next
                    os.remove(wanted["path"]["path"])
                if kind == "timelapse" and message is None:   # the step slider, as an update of its range
                    slider = answer[1]
                    mine["newest_step"] = slider.get("maximum", 1) if isinstance(slider, dict) else slider
            except Skip as exc:
                with lock:
                    skipped.setdefault(kind, str(exc))
                continue
            except AppError as exc:
                message = str(exc) or "(an error with no message)"
            except Exception as exc:               # timeouts, dropped connections, server crashes
                message = f"{type(exc).__name__}: {exc}"
            if stop.is_set():
                return                             # cut short by the end of the soak: not counted
            with lock:
                row = result[kind]
                row["seconds"].append(time.time() - t0)
                if kind in HOSTILE and message:
                    row["refused"] += 1
                elif message and BUSY in message:   # the sampler's queue was full: said at once
                    row["busy"] += 1
                elif kind in HOSTILE or message:   # a hostile file accepted is an error too
                    row["errors"] += 1
                else:
                    row["done"] += 1
                text = message or "accepted"
                if (kind in HOSTILE or message) and text not in row["messages"] and len(row["messages"]) < 3:
                    row["messages"].append(text[:300])

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Connected before the soak starts: each Client fetches the app's API description, which costs
    # the UI a core for a while (a browser's page load does not), and that is not what is measured.
    clients = [Client(url, verbose=False) for _ in range(workers)]
    for i, client in enumerate(clients):
        threading.Thread(target=worker, args=(i, client), daemon=True).start()
    open(out + ".ready", "w").close()
    if burn_ms:
        burn(burn_ms, stop)
    while not stop.is_set():
        stop.wait(0.5)
    with lock, open(out, "w") as f:
        json.dump({"kinds": result, "skipped": skipped}, f)
    shutil.rmtree(scratch, ignore_errors=True)
    os._exit(0)   # in-flight predictions hold non-daemon executor threads: do not wait for them


def burst_main(url: str, viewers: int, out: str) -> None:
    """Runs in its own process: `viewers` clients ask for the same sample at the same moment, as a
    room does when the teacher says "press Sample" (and as every page does when a run ends);
    writes each one's seconds to `out`."""
    if os.environ.get("BLINK_BENCH_CLIENTS") != "normal":
        deprioritise_clients()
    from gradio_client import Client
    clients = [Client(url, verbose=False) for _ in range(viewers)]
    together, seconds, errors = threading.Barrier(viewers), [], []

    def ask(client) -> None:
        together.wait()
        t0 = time.time()
        try:
            client.predict(seed=0, count=64, api_name="/sample")
            seconds.append(time.time() - t0)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
    threads = [threading.Thread(target=ask, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    with open(out, "w") as f:
        json.dump({"seconds": seconds, "errors": errors}, f)
    os._exit(0)


# ---- the driver ----------------------------------------------------------------------------
def folder_usage(paths: list[str]) -> tuple[float, int]:
    """(MB, files) under these folders, by file size (what the caps count), tolerating files
    removed while they are walked (eviction runs meanwhile)."""
    total, files = 0, 0
    for top in paths:
        for folder, _, names in os.walk(top):
            for name in names:
                try:
                    total += os.lstat(os.path.join(folder, name)).st_size
                    files += 1
                except OSError:
                    pass
    return total / 2**20, files


class Sampler(threading.Thread):
    """Once a second: RSS, disk, and the time of /status (gradio_client) and GET /live/status."""

    def __init__(self, app: RunningApp, folders: dict):
        super().__init__(daemon=True)
        self.app, self.folders, self.rows, self.phase = app, folders, [], "baseline"
        self.halt = threading.Event()
        self.client = app.client()

    def run(self) -> None:
        tick = time.time()
        while not self.halt.is_set():
            row = {"phase": self.phase, "time": time.time(), "ui_rss_mb": rss_mb(self.app.process.pid)}
            t0 = time.time()
            try:
                self.client.submit(api_name="/status").result(timeout=30)
                row["status_s"] = time.time() - t0
            except Exception as exc:
                row["status_error"] = repr(exc)
            t0 = time.time()
            try:
                live = status(self.app.url)
                row.update(live_status_s=time.time() - t0, state=live.get("state"), step=live.get("step") or 0)
                pid = live.get("pid")
                trainer = {pid, *children_of(pid)} if pid else set()
                if pid and live.get("state") not in ("done", "stopped", "failed"):
                    row["trainer_rss_mb"] = sum(rss_mb(p) for p in trainer)
                # The viewer-work processes (app/viewer_work.py), the trainers' fork server among them:
                # every process below the UI that is not the running trainer.
                row["work_rss_mb"] = sum(rss_mb(p) for p in children_of(self.app.process.pid) if p not in trainer)
            except Exception as exc:
                row["live_status_error"] = repr(exc)
            for name, paths in self.folders.items():
                row[f"{name}_mb"], row[f"{name}_files"] = folder_usage(paths())
            self.rows.append(row)
            tick += 1.0
            self.halt.wait(max(0.0, tick - time.time()))


def code_caps(uploads_mb: float) -> dict:
    """The disk caps as the code defines them today (other work adds some: read, never assumed)."""
    from app import job, sample_tab
    from core import uploads
    caps = {"uploads_mb": uploads_mb or float(uploads.UPLOADS_MB), "runs_mb": float(job.MAX_RUNS_MB),
            "sample_outputs_files": getattr(sample_tab, "MAX_OUTPUTS", None)}
    for module in (uploads, sample_tab):
        for name, value in vars(module).items():
            if name.endswith("_MB") and isinstance(value, (int, float)) and name != "UPLOADS_MB":
                caps[f"{module.__name__}.{name}"] = value
    return caps


def summarise(rows: list[dict], phase: str) -> dict:
    picked = [r for r in rows if r["phase"] == phase]
    if not picked:
        return {}
    span = picked[-1]["time"] - picked[0]["time"]
    out = {"seconds": round(span, 1), "status_errors": sum("status_error" in r for r in picked)}
    for key in ("status_s", "live_status_s"):
        values = [r[key] for r in picked if key in r]
        out[key] = {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95), "max": max(values, default=None)}
    for key in ("ui_rss_mb", "trainer_rss_mb", "work_rss_mb"):
        values = [r[key] for r in picked if key in r]
        out[key] = {"start": values[0] if values else None, "peak": max(values, default=None),
                    "end": values[-1] if values else None}
    for key in [k for k in picked[0] if k.endswith(("_mb", "_files")) and "rss" not in k]:
        out[f"{key}_peak"] = max(r[key] for r in picked)
    return out


def trainer_rates(rows: list[dict], events_path: str) -> dict[str, float]:
    """The trainer's steps/s in each phase, from its own log (a step and its time every log step),
    not from /status, whose step moves only at log steps: over 20 s that rounds by up to 10%.
    A phase's wall-clock span maps onto the log's clock by the earliest sighting of a logged step."""
    with open(events_path) as f:
        logged = [(row["time"], row["step"]) for row in map(json.loads, f) if "loss_d" in row]
    logged_at = {step: t for t, step in reversed(logged)}
    offset = min(r["time"] - logged_at[r["step"]] for r in rows if r.get("step") in logged_at)
    rates = {}
    for phase in ("baseline", "soak", "after"):
        times = [r["time"] - offset for r in rows if r["phase"] == phase]
        inside = [(t, step) for t, step in logged if times and times[0] <= t <= times[-1]]
        if len(inside) < 2:   # a phase shorter than two log steps, or a run that ended before it
            rates[phase] = None
            continue
        (t0, s0), (t1, s1) = inside[0], inside[-1]
        rates[phase] = (s1 - s0) / (t1 - t0)
    return rates


def describe_run_end(rows: list[dict], steps: int) -> str:
    """The run's state at the end, and for a running one when its step last moved (the status
    moves at log steps only: every 25 steps, which is half a minute on a loaded CPU)."""
    final = rows[-1]
    text = f"{final['state']} at step {final['step']} of {steps}"
    if final["state"] != "running":
        return text
    soak = [r for r in rows if r["phase"] == "soak"]
    moved = [r["time"] for earlier, r in zip(soak, soak[1:]) if r["step"] != earlier["step"]]
    if not moved:
        return text + ", NOT advancing during the soak"
    return text + f", advancing (last step change {final['time'] - moved[-1]:.0f} s before the end)"


def viewer_work_cpu(app: RunningApp) -> dict[int, float]:
    """CPU seconds of each child of the UI but the running trainer: the viewer-work process (and
    the idle fork server)."""
    trainer = status(app.url).get("pid")
    seconds = {}
    for pid in children_of(app.process.pid):
        if pid != trainer:
            try:
                seconds[pid] = cpu_seconds(pid)
            except OSError:   # gone meanwhile
                pass
    return seconds


def cpu_now(app: RunningApp, client_pid: int | None = None) -> dict:
    """The time, and the CPU seconds so far of the UI, of each viewer-work process and of the bench's
    client process (if given): one end of a window that ms_per_s measures."""
    return {"time": time.time(), "ui": cpu_seconds(app.process.pid), "work": viewer_work_cpu(app),
            "client": cpu_seconds(client_pid) if client_pid else 0.0}


def ms_per_s(start: dict, end: dict) -> dict:
    """CPU ms a second over the window from start to end (cpu_now), for the UI, the viewer-work
    processes together (one started meanwhile counts from 0) and the client."""
    seconds = end["time"] - start["time"]
    work = sum(cpu - start["work"].get(pid, 0.0) for pid, cpu in end["work"].items())
    return {"ui": (end["ui"] - start["ui"]) / seconds * 1000, "work": work / seconds * 1000,
            "client": (end["client"] - start["client"]) / seconds * 1000}


def start_run(app: RunningApp, key: str, steps: int) -> str:
    """Press Start with the page's defaults and `steps`, through the live /start's own names."""
    client = app.client()
    params = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/start"]["parameters"]
    wanted = {"dataset": "bundled-mnist", "steps": steps, "key": key}
    message = client.predict(**{p["parameter_name"]: wanted[p["parameter_name"]] for p in params
                                if p["parameter_name"] in wanted}, api_name="/start")
    deadline = time.time() + 300
    while status(app.url).get("state") != "running":
        if time.time() > deadline:
            raise RuntimeError(f"the run did not start: {message} / {status(app.url)}")
        time.sleep(0.5)
    return message


def print_endpoints(app: RunningApp) -> None:
    endpoints = app.client().view_api(return_format="dict", print_info=False)["named_endpoints"]
    print("endpoints (live):")
    for name, ep in endpoints.items():
        print(f"  {name}({', '.join(p['parameter_name'] for p in ep['parameters'])})")


def table(report: dict) -> None:
    cell = lambda v, f="{:.3f}": "-" if v is None else f.format(v)   # noqa: E731
    soak, caps = report["soak"], report["caps"]
    stand_in = f", burning {report['stand_in_ms']:.0f} ms/s" if report.get("stand_in_ms") else ""
    print(f"\nSoak: {report['seconds']:.0f} s, {report['workers']} workers (think {report['think']} s), one client process{stand_in} "
          f"(clients at {report['client_priority']} priority); run of {report['steps']} steps on bundled MNIST")
    print("\n| action | done | refused (expected) | busy | errors | p50 s | p95 s | first messages |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, row in report["actions"].items():
        print(f"| {kind} | {row['done']} | {row['refused']} | {row['busy']} | {row['errors']} | {cell(row['p50_s'], '{:.2f}')} | "
              f"{cell(row['p95_s'], '{:.2f}')} | {' / '.join(row['messages']) or '-'} |")
    for kind, why in report["skipped"].items():
        print(f"| {kind} | skipped: {why} | | | | | | |")
    ui, trainer = soak["ui_rss_mb"], soak["trainer_rss_mb"]
    print("\n| figure | value | target |")
    print("|---|---|---|")
    print(f"| UI RSS MB start / peak / end | {cell(ui['start'], '{:.0f}')} / {cell(ui['peak'], '{:.0f}')} / "
          f"{cell(ui['end'], '{:.0f}')} | < {RSS_TARGET_MB} |")
    work = soak["work_rss_mb"]
    print(f"| other children of the UI (viewer work, fork server) RSS MB start / peak / end | "
          f"{cell(work['start'], '{:.0f}')} / {cell(work['peak'], '{:.0f}')} / {cell(work['end'], '{:.0f}')} | |")
    print(f"| trainer RSS MB start / peak / end | {cell(trainer['start'], '{:.0f}')} / "
          f"{cell(trainer['peak'], '{:.0f}')} / {cell(trainer['end'], '{:.0f}')} | |")
    print(f"| uploads folder MB peak (files) | {soak['uploads_mb_peak']:.1f} ({soak['uploads_files_peak']}) | "
          f"cap {caps['uploads_mb']:.0f} MB |")
    print(f"| Sample tab outputs MB peak (files) | {soak['sample_outputs_mb_peak']:.1f} "
          f"({soak['sample_outputs_files_peak']}) | {caps['sample_outputs_files']} returned files at most |")
    print(f"| Gradio upload/cache folder MB peak (files) | {soak['gradio_mb_peak']:.1f} ({soak['gradio_files_peak']}) "
          "| no cap in the code |")
    print(f"| runs folder MB peak | {soak['runs_mb_peak']:.1f} | cap {caps['runs_mb']:.0f} MB |")
    for name, value in caps.items():
        if "." in name:
            print(f"| (cap in the code) {name} | {value} | |")
    for key, label in (("status_s", "/status (gradio_client)"), ("live_status_s", "GET /live/status")):
        s = soak[key]
        print(f"| {label} s p50 / p95 / max | {cell(s['p50'])} / {cell(s['p95'])} / {cell(s['max'])} | "
              f"p95 < {STATUS_P95_TARGET_S} |")
    print(f"| /status calls failed | {soak['status_errors']} | 0 |")
    ui = report["ui_cpu_ms_per_s"]
    print(f"| UI CPU ms/s: no viewer before / soak / after | {ui['baseline']:.0f} / {ui['soak']:.0f} / {ui['after']:.0f} | |")
    print(f"| viewer-work processes' CPU ms/s: soak / after | {report['viewer_work_cpu_ms_per_s']:.0f} / "
          f"{report['viewer_work_cpu_ms_per_s_after']:.0f} | |")
    print(f"| the bench's client process CPU ms/s (a real room's browsers run elsewhere) | "
          f"{report['client_cpu_ms_per_s']:.0f} | |")
    rates = report["trainer_steps_per_s"]
    print(f"| trainer steps/s: no viewer before / soak / no viewer after (ratio to before and after) | "
          f"{cell(rates['baseline'], '{:.2f}')} / {cell(rates['soak'], '{:.2f}')} / {cell(rates['after'], '{:.2f}')} "
          f"({cell(report['trainer_ratio'])}) | |")
    print(f"| the run at the end | {report['run_end']} | finished, or running and advancing |")
    if report["burst"]:
        b = report["burst"]
        print(f"| {b['viewers']} viewers ask for the same sample at once: p50 / last s (errors) | "
              f"{cell(b['p50_s'], '{:.2f}')} / {cell(b['max_s'], '{:.2f}')} ({len(b['errors'])}) | |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--burst-client":
        burst_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="how long the viewers act")
    parser.add_argument("--workers", type=int, default=8, help="viewer threads in the client process")
    parser.add_argument("--think", type=float, default=0.0,
                        help="mean seconds a viewer looks at an answer before its next action (0: a flood)")
    parser.add_argument("--steps", type=int, default=0,
                        help=f"the run's steps (default: enough to outlast the soak at {RATE_CEILING} steps/s)")
    parser.add_argument("--uploads-mb", type=float, default=8.0,
                        help="BLINK_UPLOADS_MB for the app: small, so the soak's uploads cross it and eviction "
                             "runs (0: the code's default)")
    parser.add_argument("--burst", type=int, default=0,
                        help="after the soak, this many viewers ask for the same sample at once (0: none)")
    parser.add_argument("--stand-in", type=float, default=0.0, metavar="MS",
                        help="the client process also burns MS ms of CPU a second at its priority (with "
                             "--workers 0: what the bench's own clients cost the trainer, no request sent)")
    parser.add_argument("--report", default="", help="also append the JSON line to this file")
    args = parser.parse_args()
    steps = args.steps or int(RATE_CEILING * (BASELINE_SECONDS + args.seconds + 60))
    from core import data
    caps = code_caps(args.uploads_mb)

    root = tempfile.mkdtemp(prefix="bench-soak-")
    paths = {name: os.path.join(root, name) for name in ("runs", "cache", "gradio", "tmp")}
    for path in paths.values():
        os.makedirs(path)
    key = secrets.token_urlsafe(8)
    env = {"BLINK_HOST_KEY": key, "BLINK_DATA_DIR": paths["cache"], "BLINK_OFFLINE": "1",
           "GRADIO_TEMP_DIR": paths["gradio"], "TMPDIR": paths["tmp"]}   # TMPDIR: the Sample tab's outputs
    if args.uploads_mb:
        env["BLINK_UPLOADS_MB"] = str(args.uploads_mb)
    app = RunningApp(paths["runs"], env=env).wait_ready()
    client = None
    try:
        time.sleep(15)   # the trainers' fork server finishes its imports
        print_endpoints(app)
        print("start:", start_run(app, key, steps), flush=True)
        import glob
        folders = {"uploads": lambda: [os.path.join(paths["cache"], "uploads")],
                   "sample_outputs": lambda: glob.glob(os.path.join(paths["tmp"], "blink-sample-*")),
                   "gradio": lambda: [paths["gradio"]], "runs": lambda: [paths["runs"]]}
        sampler = Sampler(app, folders)
        sampler.start()
        before = [cpu_now(app)]
        time.sleep(BASELINE_SECONDS)
        before.append(cpu_now(app))

        out = os.path.join(root, "clients.json")
        client = subprocess.Popen([sys.executable, __file__, "--client", app.url, str(args.workers), out,
                                   str(data.MAX_FILES), str(args.think), str(args.stand_in)], cwd=ROOT)
        while not os.path.exists(out + ".ready"):
            if client.poll() is not None:
                raise RuntimeError("the client process exited before its viewers started")
            time.sleep(0.5)
        sampler.phase = "soak"
        during = [cpu_now(app, client.pid)]
        time.sleep(args.seconds)
        during.append(cpu_now(app, client.pid))
        client.send_signal(signal.SIGTERM)
        client.wait(120)
        sampler.phase = "after"   # no viewer again: the trainer's own drift, measured on both sides
        after = [cpu_now(app)]
        time.sleep(BASELINE_SECONDS)
        after.append(cpu_now(app))
        sampler.phase = "burst"
        burst = {}
        if args.burst:   # the run still trains: the room asks beside it
            burst_out = os.path.join(root, "burst.json")
            subprocess.run([sys.executable, __file__, "--burst-client", app.url, str(args.burst), burst_out],
                           cwd=ROOT, timeout=600)
            with open(burst_out) as f:
                burst = json.load(f)
        sampler.halt.set()
        sampler.join(60)
        with open(out) as f:
            clients = json.load(f)

        from core.rundir import RunDir
        rates = trainer_rates(sampler.rows, glob.glob(os.path.join(paths["runs"], "*", RunDir.EVENTS))[0])
        soak = summarise(sampler.rows, "soak")
        run_end = describe_run_end([r for r in sampler.rows if "state" in r], steps)
        baseline = summarise(sampler.rows, "baseline")
        actions = {}
        for kind, row in clients["kinds"].items():
            if kind not in clients["skipped"]:
                actions[kind] = {**{k: row[k] for k in ("done", "refused", "busy", "errors", "messages")},
                                 "p50_s": percentile(row["seconds"], 0.5), "p95_s": percentile(row["seconds"], 0.95)}
        report = {"bench": "soak", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": args.seconds,
                  "workers": args.workers, "think": args.think, "stand_in_ms": args.stand_in, "steps": steps, "load_average": os.getloadavg(),
                  "client_priority": "normal" if os.environ.get("BLINK_BENCH_CLIENTS") == "normal" else "idle",
                  "caps": caps, "baseline": baseline, "soak": soak, "actions": actions,
                  "skipped": clients["skipped"], "run_end": run_end,
                  "burst": burst and {"viewers": args.burst, "errors": burst["errors"],
                                      "p50_s": percentile(burst["seconds"], 0.5),
                                      "max_s": max(burst["seconds"], default=None)},
                  "trainer_steps_per_s": rates,
                  "trainer_ratio": (rates["soak"] / ((rates["baseline"] + rates["after"]) / 2)
                                    if None not in rates.values() else None),
                  "ui_cpu_ms_per_s": {"baseline": ms_per_s(*before)["ui"], "soak": ms_per_s(*during)["ui"],
                                      "after": ms_per_s(*after)["ui"]},
                  "viewer_work_cpu_ms_per_s": ms_per_s(*during)["work"],
                  "viewer_work_cpu_ms_per_s_after": ms_per_s(*after)["work"],
                  "client_cpu_ms_per_s": ms_per_s(*during)["client"]}
        line = json.dumps(report, default=float)
        print(line)
        if args.report:
            with open(args.report, "a") as f:
                f.write(line + "\n")
        table(report)
        print(f"\n(app log and folders: {root})")
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        app.stop(timeout=90)


if __name__ == "__main__":
    main()
