"""Blink's self-check: which device a run gets here and why, then a short real run on it.

    python -m core.doctor                    # the device Start would use (auto)
    python -m core.doctor --device xla-cpu   # or any device choice, as on the page

Run it first in a notebook or on a new machine. The short run takes the road a run from the
page takes (core.train.train, one process driving every device: SPMD on several), into a
temporary run directory, and reports what a TPU user needs to know: graph compilations (they
must stop growing), ops that fell back to the host, and images per second.

    torchrun --nproc-per-node 2 -m core.doctor --device cuda   # the short run over 2 processes (DDP)

Under torchrun the short run is one run over every process, as `torchrun ... -m core.train` trains;
rank 0 prints.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile

from core import devices, distributed
from core.config import DEVICES, ConfigError, TrainConfig
from core.rundir import RunDir
from core import versions


def describe(requested: str = "auto", ranks=None) -> tuple[devices.DeviceInfo, list[str]]:
    """The device a run gets, and the facts that decided it, in plain lines. ranks: this process's
    core.distributed.Ranks under torchrun."""
    devices.prepare_environment(requested)
    pci_ids = devices.tpu_pci_ids()
    # Read from the installed packages' metadata, not imported: importing torch_xla takes seconds.
    installed = versions.installed_versions()
    lines = [f"Python {platform.python_version()}, " + ", ".join(f"{name} {version or 'not installed'}"
                                                              for name, version in installed.items())]
    for problem in versions.mismatches(installed):
        lines.append(f"MISMATCH: {problem}. Fix: run `python tools/notebook_setup.py` (it installs a set "
                     "that fits together), then this check again.")
    lines.append(f"PJRT_DEVICE: {os.environ.get('PJRT_DEVICE') or 'unset'}")
    if pci_ids:
        generation = devices.tpu_generation(pci_ids, os.environ.get("TPU_ACCELERATOR_TYPE", ""))
        lines.append(f"TPU chips on PCI: {len(pci_ids)} ({generation}); libtpu found: "
                     f"{'yes' if devices.libtpu_found() else 'no'}")
    else:
        lines.append("TPU chips on PCI: none")
    info = devices.probe(requested)
    lines.append(f"torchrun: {distributed.where_launched()}")
    if ranks:
        try:
            info = ranks.describe(info)
        except ValueError as exc:
            lines.append(f"REFUSED under torchrun: {exc}")
    lines.append(f"Device: {info.name} ({info.kind}): {info.layout}"
                 + (", in the trainer process" if info.processes == 1 else ""))
    if devices.is_cuda(info.kind):
        import torch
        total = torch.cuda.get_device_properties(0).total_memory
        lines.append(f"GPU memory: {total / 2**30:.1f} GiB")
        if info.available > 1 and info.processes == 1:
            lines.append(f"GPUs: {info.available}: Start on the page trains on all of them, a process each (DDP; "
                         "Advanced: Processes lowers it), as `torchrun --nproc-per-node "
                         f"{info.available} -m core.train ...` does")
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        lines.append(f"Host memory: {pages * page_size / 2**30:.1f} GiB, {os.cpu_count()} CPU cores")
    except (ValueError, OSError):
        pass
    if info.notice:
        lines.append(f"Note: {info.notice}")
    for precision, reason in info.precision_refused.items():
        lines.append(f"{precision} is not offered here: {reason}")
    return info, lines


def short_run(requested: str, steps: int, batch_size: int | None, ranks=None) -> tuple[bool, list[str]]:
    """A real run of `steps` steps through the trainer; (it finished, lines to print: rank 0's)."""
    from core.plan import plan_run
    from core.train import SessionEnds, probe_device, train
    config = TrainConfig(device=requested, steps=steps, log_every=5, grid_every=steps, quality_every=0,
                         checkpoint_every=steps, **({"batch_size": batch_size} if batch_size else {}))
    leads = ranks is None or ranks.leads
    planned = (None, "", None)
    if leads:   # planned as the CLI plans a run
        run_path = os.path.join(tempfile.mkdtemp(prefix="blink-doctor-"), "run")
        try:
            info = probe_device(requested, ranks)
            plan = plan_run(config, info)
            RunDir.create(plan, path=run_path)
            planned = (plan, run_path, info)
        except (SessionEnds, ConfigError) as exc:
            planned = (None, getattr(exc, "message", str(exc)), None)
    plan, run_path, info = ranks.share(planned) if ranks else planned
    if plan is None:
        return False, [f"Short run: refused: {run_path}"] if leads else []
    state = train(plan, run_path, device_info=info, ranks=ranks)
    run = RunDir(run_path)
    config = plan.config
    if not leads:
        return state == "done", []
    status = run.read_status()
    diag = status.diagnostics
    unit, units = ("process", "processes") if status.processes > 1 else ("device", "devices")
    split = (f", {config.batch_size // status.devices} per {unit} on {status.devices} {units}"
             if status.devices > 1 else "")
    lines = [f"Short run: {state} after {status.step} of {steps} steps "
             f"(batch {config.batch_size}{split}, {status.elapsed:.1f} s)"]
    if state != "done":
        lines.append(f"  {status.message}")
        lines.append(f"  The run directory is kept for a look: {run_path}")
        return False, lines
    if status.images_per_second:
        lines.append(f"  speed: {status.images_per_second:.0f} img/s ({status.steps_per_second:.1f} steps/s, "
                     "compilation left out)")
    if diag.get("compiles") is not None:
        events, _ = run.read_events()
        counts = [e["xla_compiles"] for e in events if "xla_compiles" in e]
        steady = len(counts) >= 3 and counts[-1] == counts[len(counts) // 2]
        lines.append(f"  XLA: {diag['compiles']} graph compilations ({diag.get('compile_seconds')} s), "
                     + ("stopped growing" if steady else "STILL GROWING: a step's graph changes shape"))
        if diag.get("batch_shards"):
            lines.append("  each device's piece of a batch: " + ", ".join("x".join(map(str, shape))
                                                                    for shape in diag["batch_shards"]))
        fallbacks = diag.get("fallback_ops") or []
        lines.append("  ops run on the host: " + (", ".join(fallbacks) if fallbacks else "none"))
        if diag.get("compile_cache"):
            lines.append(f"  compilation cache: {devices.cache_in_words(diag['compile_cache'])}")
    if diag.get("memory_total"):
        lines.append(f"  device memory: {diag['memory_used'] / 2**30:.2f} of {diag['memory_total'] / 2**30:.1f} GiB")
    shutil.rmtree(os.path.dirname(run_path), ignore_errors=True)
    return True, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--steps", type=int, default=30, help="steps of the short run (0: skip it)")
    parser.add_argument("--batch-size", type=int, default=None, help="over all devices (default: the app's)")
    args = parser.parse_args(argv)
    ranks = distributed.Ranks.join() if distributed.launched() else None
    say = print if ranks is None or ranks.leads else (lambda *_, **__: None)
    try:
        say("Blink self-check", flush=True)
        info, lines = describe(args.device, ranks)
        for line in lines:
            say(f"  {line}", flush=True)
        if args.steps <= 0:
            return 0
        compiling = " (XLA compiles the first steps)" if devices.is_xla(info.kind) else ""
        say(f"Training {args.steps} steps on {info.name}{compiling}...", flush=True)
        finished, lines = short_run(args.device, args.steps, args.batch_size, ranks)
        for line in lines:
            say(line, flush=True)
        say(f"OK: Start on the page trains on {info.name}." if finished else "FAILED: see the lines above.")
        return 0 if finished else 1
    finally:
        if ranks:
            ranks.leave()


if __name__ == "__main__":
    sys.exit(main())
