"""Where the learning rates start to fall, scored where a default run stands 60 s after Start.

    python lab/decay_at_60s.py       # seeds 0-2, lr_decay_start 0.5 (the default) and 0.3

The CLI trainer at the defaults of a 2,000-step run (the form's length), stopped through its run
directory at step 1,475 (bench_digits.py's runs stood at 1,457-1,485 at 60 s), its saved generator
scored as bench_digits.py scores (Frechet distance, 5,000 samples). One JSON line per run.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOP = 1475


def main() -> None:
    sys.path.insert(0, ROOT)
    from bench.bench_digits import SCORED_SAMPLES, score_run
    from bench.bench_speed import config_args, run_trainer
    from core.data import load_bundled_mnist
    from core.quality import MnistMeter
    meter = MnistMeter(load_bundled_mnist().images, n_fake=SCORED_SAMPLES)
    for seed in (0, 1, 2):
        for start in (0.5, 0.3):
            with tempfile.TemporaryDirectory() as tmp:
                run = os.path.join(tmp, "run")
                out = run_trainer(config_args({"steps": 2000, "lr_decay_start": start, "seed": seed, "quality_every": 0}),
                                  stop_when=lambda e: e.get("step", 0) >= STOP, keep=run)
                scores = score_run(run, meter)
                print(json.dumps({"lr_decay_start": start, "seed": seed, "step": out["status"]["step"],
                                  **{k: round(v, 3) for k, v in scores.items()}}), flush=True)


if __name__ == "__main__":
    main()
