"""Data-wait share of the trainer's step on XLA: BatchStream cutting and sending each batch when the
step asks for it (before), against cutting and sending the next one in a thread while the step runs
(after: prefetch, the default on XLA).

    CPU_NUM_DEVICES=4 python lab/bench_input.py --steps 60 --warmup 10

The trainer's own setup and step (core/training.py; a mark_step after each, as the Loop does) at
batch 64, 16 per device on 4 XLA:CPU devices (SPMD), bundled MNIST at the preset the device gets.
One process, one compiled step: `--steps` steps from a plain stream, then `--steps` from a
prefetching one, each after `--warmup` steps of its own. The data-wait share is the status's
`data_wait_share`: the seconds GanStep waited for batches over the wall seconds of those steps.
Prints one line `BENCH {...}` with both settings and their ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def measure(training, stream, steps: int, warmup: int) -> dict:
    """Data-wait share and speed of `steps` steps drawn from `stream`, after `warmup` of them."""
    rt, step = training.rt, training.gan_step
    for _ in range(warmup):
        training.step(stream)
        rt.mark_step()
    rt.synchronize()
    t0, waited = time.perf_counter(), step.data_seconds
    for _ in range(steps):
        training.step(stream)
        rt.mark_step()
    rt.synchronize()
    seconds = time.perf_counter() - t0
    data = step.data_seconds - waited
    return {"data_wait_share": round(data / seconds, 4), "data_ms_per_step": round(1000 * data / steps, 2),
            "steps_per_second": round(steps / seconds, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="xla-cpu", choices=("tpu", "xla-cpu", "cuda", "cpu"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args(argv)

    from core import devices
    from core.config import TrainConfig
    from core.data.stream import BatchStream
    from core.plan import plan_run
    from core.training import build_training
    config = TrainConfig(device=args.device, batch_size=args.batch_size)
    devices.prepare_environment(config.device)
    info = devices.probe(config.device)
    if info.kind != config.device:   # a fallback would measure another device under this one's name
        sys.exit(info.notice)
    training = build_training(plan_run(config, info))
    config = training.config   # as it trains: 'auto' and the defaults resolved
    built = training.stream
    if built.keep_on_device:
        sys.exit(f"{info.name} keeps the set on the device: there is no host input work to overlap")
    streams = {setting: BatchStream(built.images, config.batch_size, built.device, config.seed, labels=built.labels,
                                    place=training.rt.to_device, prefetch=prefetch)
               for setting, prefetch in (("before", False), ("after", True))}
    result = {"device": info.name, "devices": training.rt.device_count, "batch_size": config.batch_size,
              "preset": config.preset, "steps": args.steps}
    for setting, stream in streams.items():
        result[setting] = measure(training, stream, args.steps, args.warmup)
        print(setting, result[setting], flush=True)
    before, after = result["before"], result["after"]
    result["wait_share_ratio"] = round(before["data_wait_share"] / max(after["data_wait_share"], 1e-9), 1)
    result["speed_ratio"] = round(after["steps_per_second"] / before["steps_per_second"], 3)
    print("BENCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
