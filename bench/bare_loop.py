"""The bare loop: the trainer's own setup and step (core/training.py), stepped with nothing around
them (no run directory, status, grids, quality or checkpoints). What the trainer's speed is
compared with: the trainer / bare ratio is what its bookkeeping costs.

    python bench/bare_loop.py --steps 200 --warmup 30 [--device cpu] [--threads 2] [--set KEY=VALUE]

Prints one line `BENCH {"steps_per_second": ..., "images_per_second": ..., ...}`. Run in a fresh
process per measurement (the benches do): XLA cannot be re-initialised in-process, and a fresh
process has nobody else's threads or caches.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def bare_loop(settings: dict, steps: int, warmup: int, compile_models: bool = False) -> dict:
    """Steady steps/s of build_training(config).step() for `steps` steps after `warmup` steps.

    compile_models: torch.compile G and D first (an experiment's lever; the trainer does not)."""
    from core import devices
    from core.config import TrainConfig
    from core.plan import plan_run
    from core.training import build_training
    config = TrainConfig(**settings)
    devices.prepare_environment(config.device)
    info = devices.probe(config.device)
    training = build_training(plan_run(config, info))
    config = training.config   # as it trains: 'auto' and the defaults resolved
    if compile_models:
        import torch
        training.gan_step.G = torch.compile(training.G)
        training.gan_step.D = torch.compile(training.D)
    rt = training.rt
    warmup_seconds = _timed_steps(training, warmup)
    transfers_before = rt.host_transfers()
    with _cuda_syncs_counted(rt.kind == "cuda") as cuda_syncs:
        seconds = _timed_steps(training, steps)
    if rt.is_xla:
        host_transfers = (rt.host_transfers() - transfers_before) / steps
    else:
        host_transfers = cuda_syncs() / steps if rt.kind == "cuda" else None
    return {"steps_per_second": steps / seconds,
            "images_per_second": steps * config.batch_size * config.n_critic / seconds,
            "warmup_seconds": warmup_seconds, "device": info.name, "batch_size": config.batch_size,
            "compiles": rt.compile_count(), "host_transfers_per_step": host_transfers}


def _timed_steps(training, steps: int) -> float:
    """Seconds for `steps` steps of the training, every step dispatched finished."""
    t0 = time.perf_counter()
    for _ in range(steps):
        training.step()
        training.rt.mark_step()
    training.rt.synchronize()
    return time.perf_counter() - t0


@contextlib.contextmanager
def _cuda_syncs_counted(on: bool):
    """Count the steps' host synchronisations on CUDA (torch's sync debug mode warns on each);
    the final synchronize() is one of them."""
    if not on:
        yield lambda: None
        return
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield lambda: max(0, sum("synchroniz" in str(w.message) for w in caught) - 1)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def parse_settings(pairs: list[str]) -> dict:
    """KEY=VALUE pairs as TrainConfig values, typed from the field's annotation."""
    from dataclasses import fields
    from core.config import TrainConfig
    kinds = {f.name: {"int": int, "float": float, "str": str}[str(f.type).split(" ")[0]] for f in fields(TrainConfig)}
    settings = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        settings[key] = kinds[key](value)
    return settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--width", type=int, default=None, help="an experiment's width of the 'fast' preset")
    parser.add_argument("--compile", action="store_true", help="torch.compile G and D (an experiment)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig value")
    args = parser.parse_args(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.width:
        from core import architecture
        architecture.PRESET_WIDTH["fast"] = args.width
    result = bare_loop({"device": args.device, **parse_settings(args.set)}, args.steps, args.warmup, args.compile)
    print("BENCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
