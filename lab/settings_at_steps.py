"""Settings against each other at equal steps: the CLI trainer to N steps, scored as
bench/bench_digits.py scores (issue 44's levers at a fixed step count, e.g. the EMA's decay).

    python lab/settings_at_steps.py --steps 1600 --seeds 0 1 \
        --base "gan=rpgan batch_size=64" --variant "ema=0.99" --variant "ema=0.999"
    python lab/settings_at_steps.py --steps 2000 --stop-at 1475 --seeds 0 1 2 \
        --variant "lr_decay_start=0.5" --variant "lr_decay_start=0.3"   # where a default run is at 60 s

Each variant trains the CLI (bench_speed.run_trainer) with the base and its own settings, in turn
seed by seed (a machine that slows down slows each alike); --stop-at asks it to stop through its
run directory once its log (every 25 steps) passes that step, as a Stop on the page would, so a run
of --steps is scored part-way, its learning rates as they were there (the step it stopped at is in
the line). The saved generator (the EMA of G where the run has one) is
scored on 5,000 samples. One JSON line per run on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def settings(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--stop-at", type=int, default=None, help="stop the run at this step (default: its end)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--base", default="")
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from bench.bench_digits import SCORED_SAMPLES, score_run
    from bench.bench_speed import config_args, run_trainer
    from core.data import load_bundled_mnist
    from core.quality import MnistMeter
    meter = MnistMeter(load_bundled_mnist().images, n_fake=SCORED_SAMPLES)
    stop = (lambda event: event.get("step", 0) >= args.stop_at) if args.stop_at else None
    for seed in args.seeds:
        for variant in args.variant or [""]:
            values = {**settings(args.base), **settings(variant), "steps": args.steps, "seed": seed,
                      "device": "cpu", "quality_every": 0}
            with tempfile.TemporaryDirectory(prefix="blink-lab-") as tmp:
                run = os.path.join(tmp, "run")
                out = run_trainer(config_args(values), stop_when=stop, keep=run)
                scores = score_run(run, meter)
            print(json.dumps({"variant": variant, "base": args.base, "seed": seed, "step": out["status"]["step"],
                              **{k: round(v, 3) for k, v in scores.items()},
                              "seconds": round(out["wall_seconds"], 1)}), flush=True)


if __name__ == "__main__":
    main()
