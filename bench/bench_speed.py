"""How fast Blink gets to digits on this machine, and where the time goes.

    python bench/bench_speed.py            # 3 seeds per figure, medians (~10 min on 2 cores)
    python bench/bench_speed.py --quick    # 1 seed, shorter runs (~3 min)

Prints, for the default config on bundled MNIST and the default device:
 (a) time from Start to recognisable digits: from launching the trainer process (--launch cli: a
     cold `python -m core.train`, torch's imports included; --launch app: a trainer whose imports
     were paid before, as the app's fork server pays them for the page's Start, bench/preloaded_cli.py)
     to the first quality measurement
     where the shipped classifier calls >= 80% of 1,024 samples with p > 0.9 and all ten digits
     appear (core.quality.recognizable). The run measures quality every 25 steps for resolution;
     its meter time is replaced by what a default run spends up to there (core.train.quality_due).
 (b) steps/s of core.train.train (events, grids, checkpoints, quality at defaults) vs the same
     model, loss, optimizers and batch stream in a bare loop; run alternately, ratio per pair,
     median of pairs (the machine is shared: only ratios from one run mean anything).
 (c) achieved FLOP/s of a training step (FlopCounterMode, fwd+bwd of D and G) as a share of this
     machine's fp32 matmul peak (torch.mm 2048x2048, best of several).
 (d) peak resident memory (VmHWM) of the trainer process for the default run.

Every figure is measured when this runs; nothing is stored or assumed.
--set key=value runs (a) for a candidate instead of the defaults (the experiments that chose the
defaults are in lab/).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

def _child_output(stdout: str) -> dict:
    for line in stdout.splitlines()[::-1]:
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError("child printed no result:\n" + stdout[-2000:])


PRELOADED_CLI = [sys.executable, os.path.join(ROOT, "bench", "preloaded_cli.py")]


def run_trainer(args: list[str], stop_when=None, timeout: float = 600, command: list[str] | None = None,
                env: dict | None = None, keep: str | None = None, preloaded: bool = False) -> dict:
    """Run the CLI trainer (`python -m core.train ARGS`) in a fresh process; return its events and timings.

    stop_when(event) -> True asks the run to stop (through the run directory, as the UI does),
    so tuning runs end as soon as digits appear. command: another entry point with core.train's
    flags (an experiment's own, e.g. lab/snapshot_trainer.py); env: added to the child's environment.
    startup_seconds: from launch to the loop's start (the status's write time less its training
    seconds); vm_hwm_mb: the child's peak resident memory, from the kernel's account at exit.
    keep: a new folder to train into and leave behind (its grids, generator and events), instead
    of a temporary one. preloaded: the trainer as the page's Start gets it, its imports paid
    before the launch (bench/preloaded_cli.py, timed from its go).
    """
    from core.rundir import RunDir
    with tempfile.TemporaryDirectory(prefix="blink-bench-") as tmp:
        run_dir = keep or os.path.join(tmp, "run")
        launcher = PRELOADED_CLI if preloaded else (command or [sys.executable, "-m", "core.train"])
        launched = time.time()
        proc = subprocess.Popen([*launcher, *args, "--run-dir", run_dir],
                                cwd=ROOT, env={**os.environ, "BLINK_RUNS_DIR": tmp, **(env or {})},
                                stdin=subprocess.PIPE if preloaded else None,
                                stdout=subprocess.PIPE if preloaded else subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                text=True)
        if preloaded:
            launched = _ready_then_go(proc)
        run, offset, events, stopped, loop_start, peak_kb = RunDir(run_dir), 0, [], False, None, None
        while peak_kb is None:
            time.sleep(0.25)
            peak_kb = _exited_peak_rss_kb(proc)
            new, offset = run.read_events(offset)
            events += new
            status = run.read_status()
            if loop_start is None and status.state in ("running", "compiling") and status.updated:
                loop_start = status.updated - status.elapsed
            if stop_when and not stopped and any(stop_when(e) for e in new):
                run.request("stop")
                stopped = True
            if time.time() - launched > timeout:
                proc.kill()
        new, offset = run.read_events(offset)
        events += new
        return {"events": events, "startup_seconds": (loop_start or launched) - launched,
                "vm_hwm_mb": peak_kb / 1024, "wall_seconds": time.time() - launched,
                "status": run.read_status().to_dict()}


def _ready_then_go(proc: subprocess.Popen) -> float:
    """bench/preloaded_cli.py's handshake: once its imports are done, the go; the time it was sent."""
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("bench/preloaded_cli.py did not get ready")
    proc.stdout.close()   # what the trainer prints goes nowhere (bench/preloaded_cli.py)
    went = time.time()
    proc.stdin.write("go\n")
    proc.stdin.close()
    return went


def _exited_peak_rss_kb(proc: subprocess.Popen) -> int | None:
    """The child's peak resident memory (KB) once it has exited (reaped here, with the kernel's
    account of that one process); None while it runs."""
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss


def config_args(settings: dict) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]


def time_to_digits(settings: dict, seed: int, max_steps: int = 4000, quality_every: int = 25,
                   preloaded: bool = False) -> dict:
    """Seconds from launch to the first recognisable measurement (None if never within max_steps);
    preloaded: launched as the page's Start launches it (run_trainer)."""
    from core.quality import recognizable

    def values(event):
        return {k[8:]: v for k, v in event.items() if k.startswith("quality_")}

    def hit(event):
        return bool(values(event)) and recognizable(values(event))

    out = run_trainer(config_args({**settings, "seed": seed, "steps": max_steps, "quality_every": quality_every}),
                      stop_when=hit, preloaded=preloaded)
    from core.config import TrainConfig
    from core.train import quality_due
    default_run = TrainConfig()
    meter_seconds = 0.0
    curve = []
    for event in out["events"]:
        v = values(event)
        if not v:
            continue
        curve.append((event["step"], event["time"], v))
        if recognizable(v):
            train_seconds = event["time"] - meter_seconds
            # A default run's measurements up to here (its early one and every quality_every steps) count.
            measured = sum(quality_due(step, default_run) for step in range(1, event["step"] + 1))
            default_meter = measured * statistics.median(c["seconds"] for _, _, c in curve)
            return {"seconds": out["startup_seconds"] + train_seconds + default_meter, "step": event["step"],
                    "startup_seconds": out["startup_seconds"], "train_seconds": train_seconds,
                    "meter_seconds": meter_seconds, "default_meter_seconds": default_meter, "values": v,
                    "curve": curve}
        meter_seconds += v.get("seconds", 0.0)
    return {"seconds": None, "step": None, "startup_seconds": out["startup_seconds"], "curve": curve,
            "status": out["status"].get("message")}


def trainer_vs_bare(steps: int, seed: int) -> dict:
    """Steady steps/s of the real trainer at default settings vs the bare loop, back to back."""
    out = run_trainer(config_args({"seed": seed, "steps": steps}))
    logs = [e for e in out["events"] if "loss_d" in e]
    first = next(e for e in logs if e["step"] >= 25)       # past start-up and the first grid
    last = logs[-1]
    trainer = (last["step"] - first["step"]) / (last["time"] - first["time"])
    bare = bare_loop_speed({"seed": seed}, last["step"] - first["step"], first["step"])
    quality = [e for e in out["events"] if "quality_seconds" in e]
    return {"trainer": trainer, "bare": bare, "ratio": trainer / bare, "vm_hwm_mb": out["vm_hwm_mb"],
            "quality_measurements": len(quality),
            "quality_seconds": statistics.median(e["quality_seconds"] for e in quality) if quality else None}


def bare_loop_speed(settings: dict, steps: int, warmup: int, threads: int | None = None) -> float:
    """Steps/s of bench/bare_loop.py (the trainer's setup and step alone) in a fresh process."""
    flags = [f"--set={k}={v}" for k, v in settings.items()] + ([f"--threads={threads}"] if threads else [])
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bare_loop.py"), "--steps", str(steps),
                           "--warmup", str(warmup), *flags], cwd=ROOT, capture_output=True, text=True, check=True)
    return _child_output(proc.stdout)["steps_per_second"]


def matmul_peak(n: int = 2048, repeats: int = 7) -> float:
    """Best-of-N fp32 GFLOP/s of torch.mm n x n (best: the machine is shared, others add noise)."""
    import torch
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def counted_step(training):
    """One ordinary step of `training` under FlopCounterMode (returned, its counts read): steps first
    past a penalised one, the relativistic pairing's R1 (its first update, then one in R1_EVERY),
    whose torch.autograd.grad FlopCounterMode's module hooks refuse."""
    from torch.utils.flop_counter import FlopCounterMode
    from core.losses import R1_EVERY
    while getattr(training.gan_step.loss, "updates", 1) % R1_EVERY == 0:
        training.step()
    with FlopCounterMode(display=False) as counter:
        training.step()
    return counter


def step_flops() -> tuple[int, dict]:
    """FLOPs of one default training step: the trainer's own setup and step (core/training.py) on
    bundled MNIST, its optimizer updates included (FlopCounterMode counts the convolutions and
    matrix products, which are nearly all of it); a step without a penalty (R1's steps are left out)."""
    from core import devices, models
    from core.config import TrainConfig
    from core.plan import plan_run
    from core.training import build_training
    training = build_training(plan_run(TrainConfig(device="cpu"), devices.probe("cpu")))
    config = training.config
    counter = counted_step(training)
    info = {"preset": config.preset, "classes": training.classes, "width": models.PRESET_WIDTH[config.preset],
            "batch": config.batch_size, "G_params": models.count_parameters(training.G),
            "D_params": models.count_parameters(training.D)}
    return counter.get_total_flops(), info


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 seed and shorter runs")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per figure (default 3, --quick 1)")
    parser.add_argument("--only", default="abcd", help="which figures, e.g. 'a' or 'bc'")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="tuning: TrainConfig override for (a), e.g. --set batch_size=32")
    parser.add_argument("--max-steps", type=int, default=4000, help="(a): give up after this many steps")
    parser.add_argument("--b-steps", type=int, default=None, help="(b)/(c)/(d): trainer steps per run "
                        "(default 800, --quick 400)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in this process (c)")
    parser.add_argument("--launch", choices=("cli", "app"), default="cli",
                        help="(a): cli, a cold `python -m core.train` (it pays torch's imports); app, a trainer "
                             "as the page's Start gets it from the app's fork server, its imports paid before")
    args = parser.parse_args()
    seeds = list(range(args.seeds or (1 if args.quick else 3)))
    settings = dict(kv.split("=", 1) for kv in args.set)

    import torch
    from core.config import TrainConfig
    if args.threads:
        torch.set_num_threads(args.threads)
    from core import models
    from core import devices
    from core.plan import plan_run
    d = plan_run(TrainConfig(), devices.probe("cpu")).config
    print(f"# Blink speed bench: {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"defaults: preset {d.preset} (fast width {models.PRESET_WIDTH['fast']}), gan {d.gan}, conditional "
          f"{d.conditional}, batch {d.batch_size}, "
          f"lr {d.lr_g}/{d.lr_d}, betas ({d.beta1}, {d.beta2}), n_critic {d.n_critic}, "
          f"quality_every {d.quality_every}; seeds {seeds}", flush=True)
    if settings:
        print(f"# tuning candidate: overrides {settings}")

    if "a" in args.only:
        results = []
        for seed in seeds:
            r = time_to_digits(settings, seed, max_steps=args.max_steps, preloaded=args.launch == "app")
            results.append(r)
            if r["seconds"] is None:
                last = r["curve"][-1] if r["curve"] else None
                print(f"(a) seed {seed}: no recognisable digits within {args.max_steps} steps; last {last}", flush=True)
            else:
                v = r["values"]
                print(f"(a) seed {seed}: digits at {r['seconds']:.1f} s from launch (start-up {r['startup_seconds']:.1f} s "
                      f"+ training {r['train_seconds']:.1f} s + a default run's meter {r['default_meter_seconds']:.1f} s, "
                      f"step {r['step']}; this run's extra meter time excluded {r['meter_seconds']:.1f} s): "
                      f"confident {v['confident']:.3f}, classes {v['classes']:.0f}, fd {v['fd']:.2f}"
                      + (f", label_match {v['label_match']:.3f}" if "label_match" in v else ""), flush=True)
            curve = ", ".join(f"{s}:{c['confident']:.2f}/{c['classes']:.0f}/{c['fd']:.1f}" for s, _, c in r["curve"][::4])
            print(f"    curve step:confident/classes/fd (every 4th) {curve}", flush=True)
        secs = [r["seconds"] for r in results]
        reached = sum(s is not None for s in secs)
        med = median(secs) if reached == len(secs) else None
        print(f"(a) time to recognisable digits: median {med if med is None else f'{med:.1f}'} s over {len(seeds)} seeds "
              f"({reached}/{len(seeds)} reached; per seed {[None if s is None else round(s, 1) for s in secs]}); "
              f"start-up median {median([r['startup_seconds'] for r in results]):.1f} s", flush=True)

    if "b" in args.only or "d" in args.only:
        steps = args.b_steps or (400 if args.quick else 800)
        pairs = [trainer_vs_bare(steps, seed) for seed in seeds]
        for seed, p in zip(seeds, pairs):
            print(f"(b) seed {seed}: trainer {p['trainer']:.2f} steps/s, bare {p['bare']:.2f} steps/s, "
                  f"ratio {p['ratio']:.3f} ({p['quality_measurements']} quality measurements, "
                  f"{p['quality_seconds'] if p['quality_seconds'] is None else round(p['quality_seconds'], 3)} s each); "
                  f"peak RSS {p['vm_hwm_mb']:.0f} MB", flush=True)
        if "b" in args.only:
            print(f"(b) trainer / bare loop: median ratio {median([p['ratio'] for p in pairs]):.3f} "
                  f"(trainer {median([p['trainer'] for p in pairs]):.2f}, bare {median([p['bare'] for p in pairs]):.2f} "
                  f"steps/s, {steps} steps per run)", flush=True)
        if "d" in args.only:
            print(f"(d) peak resident memory of the trainer (VmHWM, default run of {steps} steps): "
                  f"median {median([p['vm_hwm_mb'] for p in pairs]):.0f} MB", flush=True)

    if "c" in args.only:
        flops, info = step_flops()
        peaks = [matmul_peak() for _ in seeds]
        peak = max(peaks)
        # Achieved rate from a trainer run measured now (steps/s x FLOPs per step).
        rates = ([trainer_vs_bare(args.b_steps or (200 if args.quick else 400), seed) for seed in seeds[:1]]
                 if "b" not in args.only and "d" not in args.only else pairs)
        steps_s = median([p["trainer"] for p in rates])
        achieved = steps_s * flops / 1e9
        print(f"(c) one step: {flops / 1e9:.3f} GFLOP (an ordinary step's passes of G and D, the optimizers' updates; {info}); "
              f"trainer {steps_s:.2f} steps/s -> {achieved:.1f} GFLOP/s achieved; fp32 mm 2048 peak {peak:.1f} GFLOP/s "
              f"(runs {[round(p, 1) for p in peaks]}) -> {achieved / peak:.1%} of peak", flush=True)


if __name__ == "__main__":
    main()
