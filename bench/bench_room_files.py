"""How long do a room's files take, and does the host wait behind them (issue 45)?

Starts the real app (`python app.py` with a host key, private runs folder), optionally a default
training run (bundled MNIST, batch 128, the page's defaults: the heavy lane then rests between
files), then 60 keyless viewers ask at once, through Gradio's REST road, for the Sample tab's files
(sample zips, interpolation GIFs, nearest neighbours, timelapses), and a second later the host
uploads a dataset zip with the key. Reports the host's upload time, each viewer's seconds to a file
or a refusal (p50 / p95 / max), and how many were made and refused.

    python bench/bench_room_files.py --train            # beside a default CPU run (the issue's case)
    python bench/bench_room_files.py                    # no run: the lanes without rests

The viewers are threads of this process (a REST call each: no gradio_client per viewer); the host
is one gradio_client (its upload goes through Gradio's upload route, as the page's does).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import threading
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.apphelpers import RunningApp  # noqa: E402

KEY = "bench-host-key"


def dataset_zip(folder: str, images: int = 64) -> str:
    import numpy as np
    from PIL import Image
    path = os.path.join(folder, "host-dataset.zip")
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(images):
            png = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(png, format="PNG")
            zf.writestr(f"{i}.png", png.getvalue())
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewers", type=int, default=60)
    parser.add_argument("--train", action="store_true", help="beside a default CPU training run")
    parser.add_argument("--timeout", type=float, default=600.0, help="a viewer gives up after this many seconds")
    args = parser.parse_args()
    runs_root = tempfile.mkdtemp(prefix="bench-room-files-")
    app = RunningApp(runs_root, env={"BLINK_HOST_KEY": KEY}).wait_ready()
    try:
        from gradio_client import handle_file
        host = app.client()
        time.sleep(15)   # the trainers' fork server and the quick lane's worker finish their imports
        if args.train:
            host.predict(dataset="bundled-mnist", steps=1_000_000, key=KEY, api_name="/start")
            while app.status().get("state") != "running":
                time.sleep(0.5)
            from core.rundir import list_runs
            while not list_runs(runs_root)[0].grids():   # a grid for the timelapses
                time.sleep(0.5)
            time.sleep(5)
        kinds = [("download_samples", lambda i: [i, 256, "seed"]),
                 ("interpolation_gif", lambda i: [i, i + 1, 32, "spherical", "seed", "seed"]),
                 ("neighbours", lambda i: [i, 1.0, 16, 0, 0, 0, 0, 0]),
                 ("timelapse", lambda i: [])]
        answers: list = [None] * args.viewers

        def viewer(i: int) -> None:
            api_name, make_args = kinds[i % len(kinds)]
            asked = time.monotonic()
            try:
                app.call(api_name, *make_args(i), timeout=args.timeout)
                said = "made"
            except RuntimeError as exc:   # the refusal, in its words
                said = str(exc)
            except Exception as exc:   # a timeout, a refused connection: counted, not fatal
                said = f"failed: {exc!r}"
            answers[i] = (api_name, said, time.monotonic() - asked)
        viewers = [threading.Thread(target=viewer, args=(i,)) for i in range(args.viewers)]
        for thread in viewers:
            thread.start()
        time.sleep(1.0)
        zip_path = dataset_zip(runs_root)
        asked = time.monotonic()
        *_, note = host.predict(handle_file(zip_path), KEY, api_name="/upload_dataset")
        host_seconds = time.monotonic() - asked
        for thread in viewers:
            thread.join()
        seconds = [s for _, _, s in answers] or [0.0]
        made = sum(said == "made" for _, said, _ in answers)
        busy = sum("busy" in said for _, said, _ in answers)
        other = [said for _, said, _ in answers if said != "made" and "busy" not in said]
        dropped = app.read_log().count("refused (Dropped)")
        row = {"viewers": args.viewers, "train": args.train, "host_upload_s": round(host_seconds, 1),
               "host_note": note[:60], "viewer_p50_s": round(percentile(seconds, 0.5), 1),
               "viewer_p95_s": round(percentile(seconds, 0.95), 1), "viewer_max_s": round(max(seconds), 1),
               "made": made, "refused_busy": busy, "dropped": dropped, "other": len(other),
               "first_other": (other or [None])[0]}
        print(json.dumps(row), flush=True)
        print("\n| run beside | host's upload s | viewers p50 / p95 / max s | made | told busy | other |")
        print("|---|---|---|---|---|---|")
        print(f"| {'default CPU run' if args.train else 'no run'} | {host_seconds:.1f} | "
              f"{row['viewer_p50_s']} / {row['viewer_p95_s']} / {row['viewer_max_s']} | {made} | {busy} | {len(other)} |")
    finally:
        app.stop(timeout=90)


if __name__ == "__main__":
    main()
