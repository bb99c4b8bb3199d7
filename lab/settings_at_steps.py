"""Settings against each other at equal steps: the CLI trainer to exactly N steps, scored as
bench/bench_digits.py scores (issue 44's levers at a fixed step count, e.g. the EMA's decay).

    python lab/settings_at_steps.py --steps 1600 --seeds 0 1 \
        --base "gan=rpgan batch_size=64" --variant "ema=0.99" --variant "ema=0.999"

Each variant trains `python -m core.train --device cpu` with the base and its own settings, in
turn seed by seed (a machine that slows down slows each alike); the saved generator (the EMA of
G where the run has one) is scored on 5,000 samples. One JSON line per run on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_digits import SCORED_SAMPLES, score_run  # noqa: E402


def settings(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--base", default="")
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args()
    from core.data import load_bundled_mnist
    from core.quality import MnistMeter
    meter = MnistMeter(load_bundled_mnist().images, n_fake=SCORED_SAMPLES)
    for seed in args.seeds:
        for variant in args.variant or [""]:
            values = {**settings(args.base), **settings(variant), "steps": args.steps, "seed": seed}
            with tempfile.TemporaryDirectory(prefix="blink-lab-") as tmp:
                run = os.path.join(tmp, "run")
                flags = [f"--{k.replace('_', '-')}={v}" for k, v in values.items()]
                began = time.perf_counter()
                subprocess.run([sys.executable, "-m", "core.train", "--device", "cpu", "--run-dir", run, *flags],
                               cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
                seconds = time.perf_counter() - began
                scores = score_run(run, meter)
            print(json.dumps({"variant": variant, "base": args.base, "seed": seed, "steps": args.steps,
                              **{k: round(v, 3) for k, v in scores.items()}, "seconds": round(seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
