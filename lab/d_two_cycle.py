"""D's outputs flip every step at the fast preset (issue 41's frames against the chart; a lead for 44).

    python lab/d_two_cycle.py                     # the defaults, and three candidates
    python lab/d_two_cycle.py --steps 200

Trains the default CPU run in this process (core.training's setup and step, as the trainer does)
and prints, over steps 40 to the end: the mean step-to-step change of the logged D(x) (0 for a D
that settles; about 0.7 for one that swings between two values each step), and D(x) on one fixed
real batch after every step, which tells a D that swings from batches that differ.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CANDIDATES = [{}, {"lr_d": 1e-3}, {"beta1": 0.5}, {"lr_d": 1.5e-3, "lr_g": 1.5e-3}]


def swings(change: dict, steps: int) -> tuple[float, list[float]]:
    import torch
    from core import devices
    from core.config import TrainConfig
    from core.plan import plan_run
    from core.training import build_training
    torch.manual_seed(0)
    training = build_training(plan_run(TrainConfig(steps=2000, device="cpu", **change), devices.probe("cpu")))
    fixed, labels = training.stream.next_with_labels()
    logged, on_fixed = [], []
    norms = [m for m in training.D.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for _ in range(steps):
        logged.append(float(training.step()["d_real"]))
        kept = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in norms]
        with torch.no_grad():
            on_fixed.append(float(torch.sigmoid(training.D(fixed, labels)).mean()))
        for m, (mean, var, count) in zip(norms, kept):   # the probe leaves D's running statistics as they were
            m.running_mean.copy_(mean), m.running_var.copy_(var), m.num_batches_tracked.copy_(count)
    late = logged[40:]
    return sum(abs(a - b) for a, b in zip(late, late[1:])) / (len(late) - 1), on_fixed[40:52]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()
    for change in CANDIDATES:
        change_mean, fixed = swings(change, args.steps)
        print(f"{change or 'defaults'}: D(x) changes by {change_mean:.3f} a step; on one fixed batch after steps "
              f"41-52: {' '.join(f'{v:.2f}' for v in fixed)}", flush=True)


if __name__ == "__main__":
    main()
