"""What a student sees T seconds after Start (issue 17).

    python bench/bench_digits.py --seconds 30 60 --seeds 0 1 2
    python bench/bench_digits.py --gan dcgan --batch-size 128      # another setting of the form

Starts the real app (`python app.py`, with its fork server, which pays the trainers' imports once) once. For each seed and
each T it presses Start through the named API (the form as the page first shows it, but --gan,
--batch-size and --steps, and the Advanced tab's seed), presses
Stop T seconds after pressing Start (a run of the form's length may have ended by then), waits for the run to end, and scores the generator the run
saved at the stop (what the Sample tab and a download give: the EMA of G where the run has one)
on 5,000 samples, classes 0-9 in turn, with the shipped MNIST classifier: the share called with
p > 0.9 ("confident"), the digits among those, the share called as the digit asked for, and the
Frechet distance of the classifier's features against 2,000 real digits. Between runs the page
stays open (a /status call a second) for --pause seconds between seeds.
Nothing polls during a run: the client sleeps until T, so it costs the trainer nothing.

How far a long run gets (the quality ceiling, and a wider meter) is an experiment:
lab/quality_ceiling.py.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FINAL = ("done", "failed", "stopped")
SCORED_SAMPLES = 5000


def press_start(client, seed: int, gan: str, batch_size: int, steps: int) -> float:
    """Press Start with the default form but `gan`, `batch_size` (0: the GAN type's), `steps` and
    `seed`; the time it was pressed (perf_counter)."""
    from core import devices
    from core.config import TrainConfig
    from tests.apphelpers import press_start as press
    d = TrainConfig()
    precision = devices.default_precision(devices.probe(d.device).kind)   # the form's: it offers no "auto"
    _, pressed = press(client, dataset=d.dataset, data_path="", gan=gan, preset=d.preset, batch_size=batch_size,
                       precision=precision, device=d.device, steps=steps, seed=seed)
    return pressed


def wait_final(client) -> dict:
    from tests.apphelpers import wait_for
    return wait_for(lambda: (status := client.predict(api_name="/status"))["state"] in FINAL and status,
                    timeout=120, interval=0.2, what="the run to end")


def score_run(run_path: str, meter) -> dict:
    from core.sample import load_run_generator
    generator, _ = load_run_generator(run_path)
    return meter.measure(generator, "cpu")


def at_seconds(args) -> None:
    from core.data import load_bundled_mnist
    from core.quality import MnistMeter
    from tests.apphelpers import RunningApp
    meter = MnistMeter(load_bundled_mnist().images, n_fake=SCORED_SAMPLES)
    root = tempfile.mkdtemp(prefix="blink-bench-digits-")
    app = RunningApp(root).wait_ready()
    rows = []
    try:
        client = app.client()
        for seed in args.seeds:
            for seconds in args.seconds:
                for _ in range(int(args.pause)):   # the page is open meanwhile
                    client.predict(api_name="/status")
                    time.sleep(1.0)
                pressed = press_start(client, seed, args.gan, args.batch_size, args.steps)
                time.sleep(max(0.0, seconds - (time.perf_counter() - pressed)))
                client.predict(api_name="/stop")   # a run of the form's length may have ended: then it says so
                stop_sent = time.perf_counter() - pressed
                status = wait_final(client)
                values = score_run(os.path.join(root, status["run"]), meter)
                rows.append({"seed": seed, "T": seconds, "step": status["step"], "stop_sent": stop_sent, **values})
                print(f"seed {seed}, Stop {stop_sent:.1f} s after Start: step {status['step']}, "
                      f"confident {values['confident']:.3f}, classes {values['classes']:.0f}, "
                      f"label_match {values['label_match']:.3f}, fd {values['fd']:.2f} "
                      f"({status['state']}: {status.get('message', '')[:60]})", flush=True)
    finally:
        app.stop()
    for seconds in args.seconds:
        at = [r for r in rows if r["T"] == seconds]
        print(f"at {seconds} s from Start, median of {len(at)} seeds: "
              + ", ".join(f"{k} {statistics.median(r[k] for r in at):.3f} ({', '.join(f'{r[k]:.3f}' for r in at)})"
                          for k in ("confident", "label_match", "fd"))
              + f"; classes min {min(r['classes'] for r in at):.0f}; steps {[r['step'] for r in at]}", flush=True)


def main() -> None:
    from core.config import TrainConfig
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, nargs="+", default=[30.0, 60.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pause", type=float, default=15.0, help="seconds the page is open before each Start")
    parser.add_argument("--gan", default=TrainConfig.gan, help="the form's GAN type (default: the form's, auto)")
    parser.add_argument("--batch-size", type=int, default=0, help="(default: the form's 0, the GAN type's)")
    parser.add_argument("--steps", type=int, default=TrainConfig.steps,
                        help=f"the run's length (default: the form's, {TrainConfig.steps:,}: its learning rates fall "
                             "over its second half, as a student's run's do)")
    at_seconds(parser.parse_args())


if __name__ == "__main__":
    main()
