"""Ten minutes of the defaults on MNIST, as a user sizes a 10-minute run: does a new failure mode appear?

    python lab/ten_minutes.py                      # seed 0, a 20,000-step run stopped at 600 s
    python lab/ten_minutes.py --set lr_d=3e-3      # a candidate's settings (core.train flags)

The CLI trainer (bench_speed.run_trainer) runs --steps, stopped through its run directory once its
log passes --seconds of training. Every logged event is then replayed through the phase rules
(core/phase.py) as the status computes them, and each problem the page's line would have named
(Phase.problems: D has won or is winning, mode collapse) is printed with its step. Also printed: D's and G's losses (5th to 95th percentile, what the type's
healthy ranges in core/gans.py say), how far apart D's scores on real and fake images were
(5th/95th percentile and the largest, after the first 200 steps), and the trainer's own meter from
step 1,000 on and at its last measurement (Frechet distance of the shipped classifier's features, confident share,
classes).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def share(values: list[float], fraction: float) -> float:
    """The value below which `fraction` of the sorted `values` lie."""
    return values[min(int(len(values) * fraction), len(values) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="core.train flags, e.g. lr_d=3e-3")
    args = parser.parse_args()
    from bench_speed import config_args, run_trainer
    from core.phase import Phase

    settings = {**dict(kv.split("=", 1) for kv in args.set), "seed": args.seed, "steps": args.steps}
    out = run_trainer(config_args(settings), stop_when=lambda event: event.get("time", 0) >= args.seconds,
                      timeout=args.seconds + 300)
    events = out["events"]
    gan = out["status"]["gan"]
    phase = Phase(gan, conditional=bool(out["status"]["classes"]))
    problems = []
    for event in events:
        phase.add(event)
        problems += [(event["step"], words) for words in phase.problems()]
    gaps = sorted(e["d_real"] - e["d_fake"] for e in events if "d_real" in e and e["step"] > 200)
    losses = {key: sorted(e[key] for e in events if key in e and e["step"] > 200) for key in ("loss_d", "loss_g")}
    quality = [e for e in events if "quality_fd" in e]
    later = [e["quality_fd"] for e in quality if e["step"] >= 1000] or [float("nan")]   # a short smoke run
    last = quality[-1]
    print(f"gan {gan}, seed {args.seed}: {max(e['step'] for e in events)} steps in {args.seconds:.0f} s")
    print(f"phase problems: {problems[:10] if problems else 'none'}" + (f" ({len(problems)} in all)" if problems else ""))
    print(f"D's scores apart (real - fake) after step 200: p5 {share(gaps, 0.05):.2f}, p95 {share(gaps, 0.95):.2f}, "
          f"max {gaps[-1]:.2f}, median {statistics.median(gaps):.2f}")
    print("losses after step 200 (p5-p95): " + ", ".join(
        f"{key} {share(values, 0.05):.2f}-{share(values, 0.95):.2f}" for key, values in losses.items()))
    print(f"meter from step 1,000: fd {min(later):.2f}-{max(later):.2f}; at the last measurement (step {last['step']}): fd "
          f"{last['quality_fd']:.2f}, confident {last['quality_confident']:.2f}, classes {last['quality_classes']:.0f}")


if __name__ == "__main__":
    main()
