"""The device check: run it whenever a machine with a GPU or a TPU is at hand, and put its table
in bench/README.md ("Device check").

    python tools/device_check.py                       # the device Start would use
    python tools/device_check.py --device xla-cpu      # CPU_NUM_DEVICES=4 gives 4 XLA:CPU devices

Three parts, each in its own process, as a user meets them:
 1. `python -m core.doctor`: which device, why, and a short real run;
 2. a default run through the CLI trainer (`python -m core.train`, the program the page starts),
    stopped through its run directory after --seconds of training;
 3. the bare loop (bench/bare_loop.py: the trainer's own setup and step, nothing around them) at
    the same batch size.
Then one table: images/s, in-app / bare, graph compilations, host transfers per step; on XLA, the
compiles after warm-up over the in-app run, and a second start of the same configuration: its
compile seconds and the persistent compilation cache's hits and misses (a TPU keeps one). On a
machine with several GPUs (or with --processes N), the in-app run again over N processes under
torchrun (DDP), at the same global batch, against the one process.
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
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _python(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def doctor(device: str) -> tuple[bool, str]:
    proc = _python("-m", "core.doctor", "--device", device, timeout=900)
    return proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def app_run(device: str, seconds: float, batch_size: int | None, processes: int = 1) -> dict:
    """A default run of the CLI trainer, stopped (as the page's Stop does) after `seconds` of training;
    over `processes` processes under torchrun (DDP) when more than one."""
    from core.rundir import RunDir
    folder = tempfile.mkdtemp(prefix="blink-device-check-")
    run_path = os.path.join(folder, "run")
    batch = ["--batch-size", str(batch_size)] if batch_size else []
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)] if processes > 1 else []
    proc = subprocess.Popen([sys.executable, *launcher, "-m", "core.train", "--device", device, "--steps", "1000000", *batch,
                             "--run-dir", run_path], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    run = RunDir(run_path)
    deadline = time.time() + seconds + 900      # compilation and start-up on top of the training time
    while proc.poll() is None and time.time() < deadline:
        status = run.read_status()
        if status.state == "running" and status.elapsed >= seconds:
            run.request("stop")
            break
        time.sleep(0.5)
    output = proc.communicate(timeout=300)[0]
    status = run.read_status()
    events, _ = run.read_events()
    losses = [e for e in events if "loss_d" in e]
    transfers = [(e["step"], e["xla_transfers"]) for e in losses if e.get("xla_transfers") is not None]
    # Steady transfers: between the first log step past warm-up and the last (grids and quality included).
    steady = [t for t in transfers if t[0] >= 20]
    per_step = ((steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0])
                if len(steady) >= 2 and steady[-1][0] > steady[0][0] else None)
    # Compiles after warm-up: none may come once steps repeat (a new one stalls a TPU for minutes).
    compiled = [(e["step"], e["xla_compiles"]) for e in losses if e.get("xla_compiles") is not None]
    warm = [c for c in compiled if c[0] >= 20]
    late = [step for (step, count), (_, before) in zip(warm[1:], warm) if count > before]
    return {"state": status.state, "message": status.message, "step": status.step, "device": status.device,
            "batch_size": status.batch_size, "images_per_second": status.images_per_second,
            "compiles": status.diagnostics.get("compiles"), "fallback_ops": status.diagnostics.get("fallback_ops"),
            "host_transfers_per_step": per_step, "elapsed": status.elapsed, "output": output[-2000:],
            "compiles_after_warm_up": warm[-1][1] - warm[0][1] if len(warm) >= 2 else None, "late_compile_steps": late,
            "compile_seconds": status.diagnostics.get("compile_seconds"),
            "compile_cache": status.diagnostics.get("compile_cache")}


def bare(device: str, batch_size: int, steps: int) -> dict:
    proc = _python(os.path.join("bench", "bare_loop.py"), "--device", device, "--steps", str(steps),
                   "--warmup", "20", "--set", f"batch_size={batch_size}", timeout=1800)
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError("the bare loop printed no result:\n" + (proc.stdout + proc.stderr)[-3000:])


def gpus() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cell(value, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def table(app: dict, loop: dict) -> str:
    ratio = app["images_per_second"] / loop["images_per_second"] if app["images_per_second"] else None
    rows = [("| road | images/s | in-app / bare | compiles | host transfers per step |"),
            "|---|---|---|---|---|",
            f"| in the app's trainer (`python -m core.train`, {app['step']:,} steps, {app['elapsed']:.0f} s) | "
            f"{_cell(app['images_per_second'])} | {_cell(ratio, 3)} | {_cell(app['compiles'])} | "
            f"{_cell(app['host_transfers_per_step'], 3)} |",
            f"| bare loop (bench/bare_loop.py) | {_cell(loop['images_per_second'])} | 1 | {_cell(loop['compiles'])} | "
            f"{_cell(loop['host_transfers_per_step'], 3)} |"]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seconds", type=float, default=60.0, help="training seconds of the in-app run")
    parser.add_argument("--batch-size", type=int, default=None, help="global batch (default: the app's)")
    parser.add_argument("--processes", type=int, default=None,
                        help="also run over N processes (DDP) against one; default: every GPU, when there are several")
    args = parser.parse_args(argv)
    ok, text = doctor(args.device)
    print("## core.doctor\n" + text, flush=True)
    if not ok:
        print("The doctor failed: fix what it says before timing anything.")
        return 1
    app = app_run(args.device, args.seconds, args.batch_size)
    print(f"## In-app run: {app['state']} at step {app['step']} on {app['device']}, batch {app['batch_size']}: "
          f"{app['message']}", flush=True)
    if app["state"] != "stopped" or not app["images_per_second"]:
        print(app["output"])
        return 1
    steps = max(50, min(2000, int(app["step"] * 0.3)))
    loop = bare(args.device, app["batch_size"], steps)
    print(f"## Bare loop: {steps} steps after 20 of warm-up on {loop['device']}\n", flush=True)
    print(table(app, loop))
    if app["fallback_ops"]:
        print(f"\nOps that ran on the host in the app's run: {', '.join(app['fallback_ops'])}")
    if app["compiles"] is not None:   # XLA: what a TPU's users wait for
        print(f"\nCompiles after step 20 of the in-app run: {_cell(app['compiles_after_warm_up'])}"
              f"{' (at log steps ' + ', '.join(map(str, app['late_compile_steps'])) + ')' if app['late_compile_steps'] else ''}.")
        again = app_run(args.device, 10.0, args.batch_size)
        print(f"Compile seconds: first start {_cell(app['compile_seconds'], 1)}, second start of the same "
              f"configuration {_cell(again['compile_seconds'], 1)}; its persistent cache: "
              f"{again['compile_cache'] or 'off (XLA:CPU cannot read it back)'}.")
    processes = args.processes if args.processes is not None else gpus()
    if processes > 1:
        ddp = app_run(args.device, args.seconds, app["batch_size"], processes)
        if ddp["state"] != "stopped" or not ddp["images_per_second"]:
            print(f"\nThe run over {processes} processes ended {ddp['state']}: {ddp['message']}\n{ddp['output']}")
            return 1
        print(f"\n| processes (batch {app['batch_size']}) | images/s | against one |\n|---|---|---|\n"
              f"| 1 | {_cell(app['images_per_second'])} | 1 |\n"
              f"| {processes} (DDP, torchrun) | {_cell(ddp['images_per_second'])} | "
              f"{_cell(ddp['images_per_second'] / app['images_per_second'], 2)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
