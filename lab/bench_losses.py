"""Time to recognisable digits per loss (dcgan, wgan-gp, hinge) on this machine.

    python lab/bench_losses.py                  # 10 min per loss
    python lab/bench_losses.py --quick          # 2 min per loss: a smoke figure, not a verdict
    python lab/bench_losses.py --losses wgan-gp --seconds 300 --threads 1

Each loss trains through the real entry point, core.train.train, on bundled MNIST with the
defaults (device cpu, preset auto -> fast, batch 64, the GAN type's optimizer and n_critic),
for a wall-clock budget; the budget ends through the run directory's stop request, as the UI's
Stop button does. Equal wall time, not equal steps, because a WGAN-GP step costs n_critic=5
critic updates plus a double backward.

At every checkpoint (every --every generator steps; WGAN-GP's interval is divided by n_critic
so the checkpoints are about as far apart in time) the trainer saves a fixed-noise grid, and,
when core.quality can be imported, measures quality. With the shipped classifier
(assets/mnist_classifier.safetensors) "recognisable" is core.quality.recognizable: >= 80% of
1,000 samples classified with p > 0.9 and all ten digits present; the time reported is training
time, the meter's own seconds subtracted. Without the classifier the report says so and shows
loss figures and grid paths only: a loss curve does not say when digits appear.

The machine may be shared: the report prints the load average, and the figures are this run's.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def quality_module():
    """core.quality if it imports (it is optional), else None."""
    try:
        from core import quality
    except ImportError:
        return None
    return quality


def has_classifier(quality) -> bool:
    return quality is not None and os.path.exists(getattr(quality, "CLASSIFIER_WEIGHTS", ""))


def stop_after(run, seconds: float, finished: threading.Event) -> threading.Thread:
    """Ask the trainer to stop once `seconds` have passed; the trainer reads it at its next log tick."""
    def wait_then_stop():
        if not finished.wait(seconds):
            run.request("stop")
    thread = threading.Thread(target=wait_then_stop, daemon=True)
    thread.start()
    return thread


def train_one(gan: str, seconds: float, every: int, root: str, with_quality: bool) -> dict:
    from core.config import TrainConfig, validate
    from core.rundir import RunDir
    from core.train import train

    n_critic = validate(TrainConfig(gan=gan).resolved()).n_critic
    interval = max(1, every // n_critic)
    config = TrainConfig(gan=gan, dataset="bundled-mnist", device="cpu", steps=1_000_000,
                         log_every=max(1, interval // 2), grid_every=interval, checkpoint_every=1_000_000,
                         quality_every=interval if with_quality else 0)
    from core import devices
    from core.plan import plan_run
    plan = plan_run(config, devices.probe("cpu"))
    run = RunDir.create(plan, root=root)
    finished = threading.Event()
    stop_after(run, seconds, finished)
    t0 = time.perf_counter()
    state = train(plan, run.path)
    finished.set()
    wall = time.perf_counter() - t0
    events, _ = run.read_events()
    return {"gan": gan, "state": state, "wall": wall, "run": run, "n_critic": n_critic, "interval": interval,
            "losses": [e for e in events if "loss_d" in e],
            "quality": [e for e in events if any(k.startswith("quality_") for k in e)]}


def first_recognizable(result: dict, quality) -> dict | None:
    """The first quality event meeting quality.recognizable, with the meter's time taken out."""
    meter_seconds = 0.0
    for event in result["quality"]:
        meter_seconds += event.get("quality_seconds", 0.0)
        values = {k[len("quality_"):]: v for k, v in event.items() if k.startswith("quality_")}
        if quality.recognizable(values):
            return {"step": event["step"], "train_seconds": event["time"] - meter_seconds, **values}
    return None


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if math.isfinite(value) else str(value)
    return str(value)


def report(results: list[dict], quality, classifier: bool, seconds: float, threads: int) -> None:
    load = os.getloadavg()
    print(f"\n== bench_losses: bundled MNIST, device cpu, defaults, {seconds:.0f} s per loss, "
          f"torch threads {threads}, load average {load[0]:.1f} / {load[1]:.1f} on {os.cpu_count()} cores ==")
    if classifier:
        print("quality: core.quality with the shipped MNIST classifier (recognisable = core.quality.recognizable)")
    elif quality is not None:
        print("quality: core.quality is present but its classifier weights are not "
              f"({getattr(quality, 'CLASSIFIER_WEIGHTS', '?')}): NO recognisability figure; "
              "quality columns are whatever meter it fell back to.")
    else:
        print("quality: core.quality is not available: NO recognisability figure; loss figures only.")
    for r in results:
        steps = r["losses"][-1]["step"] if r["losses"] else 0
        print(f"\n-- {r['gan']}: {r['state']}, {steps} generator steps ({steps * r['n_critic']} critic steps) "
              f"in {r['wall']:.0f} s wall, {steps / max(r['wall'], 1e-9):.2f} G steps/s; run {r['run'].path}")
        series = ["loss_d", "loss_g"] + sorted(k for k in (r["losses"][0] if r["losses"] else {})
                                               if k not in ("step", "time", "loss_d", "loss_g"))
        print("   step   time  " + "  ".join(f"{s:>12}" for s in series))
        shown = r["losses"][:: max(1, len(r["losses"]) // 8)]
        for e in shown + [e for e in r["losses"][-1:] if e not in shown]:
            print(f"   {e['step']:>4} {e['time']:>6.0f}  " + "  ".join(f"{fmt(e.get(s)):>12}" for s in series))
        if r["quality"]:
            keys = sorted(k for k in r["quality"][-1] if k.startswith("quality_"))
            print("   quality   step   time  " + "  ".join(f"{k[8:]:>10}" for k in keys))
            for e in r["quality"]:
                print(f"             {e['step']:>4} {e['time']:>6.0f}  " + "  ".join(f"{fmt(e.get(k)):>10}" for k in keys))
        grids = r["run"].grids()
        print(f"   grids: {len(grids)} saved, last {grids[-1][1] if grids else '-'}")
        if classifier:
            hit = first_recognizable(r, quality)
            print("   time to recognisable digits: " + (
                f"{hit['train_seconds']:.0f} s of training (step {hit['step']}, confident {hit['confident']:.2f}, "
                f"classes {hit['classes']:.0f})" if hit else f"not reached within {seconds:.0f} s"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--losses", default="dcgan,wgan-gp,hinge", help="comma-separated GAN types")
    parser.add_argument("--seconds", type=float, default=600.0, help="wall-clock budget per loss")
    parser.add_argument("--every", type=int, default=100,
                        help="generator steps between checkpoints (divided by n_critic for WGAN-GP)")
    parser.add_argument("--quick", action="store_true", help="120 s per loss, checkpoints every 50 steps")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--root", default="", help="where the run directories go (default: a temp folder)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.every = 120.0, 50

    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    quality = quality_module()
    classifier = has_classifier(quality)
    root = args.root or tempfile.mkdtemp(prefix="bench_losses_")
    results = []
    for gan in args.losses.split(","):
        print(f"training {gan} for {args.seconds:.0f} s ...", flush=True)
        results.append(train_one(gan, args.seconds, args.every, root, with_quality=quality is not None))
    report(results, quality, classifier, args.seconds, torch.get_num_threads())
    return 0


if __name__ == "__main__":
    sys.exit(main())
