"""How fast Blink gets to digits on this machine, and where the time goes.

    python bench/bench_speed.py            # 3 seeds per figure, medians (~10 min on 2 cores)
    python bench/bench_speed.py --quick    # 1 seed, shorter runs (~3 min)

Prints, for the default config on bundled MNIST and the default device:
 (a) time from Start to recognisable digits: from launching the trainer process (a cold start:
     the app's warm standby trainer skips most of the start-up) to the first quality measurement
     where the shipped classifier calls >= 80% of 1,024 samples with p > 0.9 and all ten digits
     appear (core.quality.recognizable). The run measures quality every 25 steps for resolution;
     its meter time is replaced by what a default run (quality_every default) spends up to there.
 (b) steps/s of core.train.train (events, grids, checkpoints, quality at defaults) vs the same
     model, loss, optimizers and batch stream in a bare loop; run alternately, ratio per pair,
     median of pairs (the machine is shared: only ratios from one run mean anything).
 (c) achieved FLOP/s of a training step (FlopCounterMode, fwd+bwd of D and G) as a share of this
     machine's fp32 matmul peak (torch.mm 2048x2048, best of several).
 (d) peak resident memory (VmHWM) of the trainer process for the default run.

Every figure is measured when this runs; nothing is stored or assumed.
Tuning options (--width, --set key=value) run (a) for a candidate instead of the defaults; they
are how the defaults in core/models.py and core/config.py were chosen.
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

# The child: the real CLI trainer (core.train.main), plus two measuring hooks that change
# nothing it does: the wall-clock time at which Loop.run starts (to add start-up overhead to
# the trainer's own 'time' field), and VmHWM when it exits. For tuning only: BLINK_BENCH_WIDTH
# overrides the "fast" preset's width, BLINK_BENCH_SNAPSHOTS keeps G at every grid step and the
# saved generator at every checkpoint.
TRAINER_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from core import models, train
width = os.environ.get("BLINK_BENCH_WIDTH")
if width:
    models.PRESET_WIDTH["fast"] = int(width)
marks = {}
original_run = train.Loop.run
def run(self):
    marks["run_start"] = time.time()
    return original_run(self)
train.Loop.run = run
snapshots = os.environ.get("BLINK_BENCH_SNAPSHOTS")
if snapshots:   # tuning: keep G's weights at every grid step, to score them offline later
    from safetensors.torch import save_file
    original_grid = train.Loop.save_grid
    def save_grid(self):
        original_grid(self)
        state = {k: v.detach().cpu().contiguous() for k, v in self.G.state_dict().items()}
        save_file(state, os.path.join(snapshots, f"G_{self.step_count:06d}.safetensors"),
                  {"time": str(self.report.elapsed()), "step": str(self.step_count), "width": str(self.G.spec.width)})
    train.Loop.save_grid = save_grid
    # ... and the generator the product saved (the EMA of G where the run has one) at every checkpoint.
    import shutil
    from core.rundir import GENERATOR_FILES
    original_write = train.Loop._write_checkpoint
    def write_checkpoint(self):
        original_write(self)
        folder = os.path.join(snapshots, f"checkpoint_{self.step_count:06d}")
        os.makedirs(folder, exist_ok=True)
        for name in GENERATOR_FILES:
            shutil.copy(self.run_dir.file(name), folder)
    train.Loop._write_checkpoint = write_checkpoint
code = train.main(sys.argv[1:])
marks["vm_hwm_kb"] = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")))
print("BENCH " + json.dumps(marks), flush=True)
sys.exit(code)
"""

# The bare loop: the same objects the trainer builds and its own step (core/step.py GanStep),
# stepped with nothing else around them.
BARE_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import torch
from core import data, devices, losses, models
from core.config import TrainConfig, validate
from core.step import GanStep
steps, warmup = int(sys.argv[2]), int(sys.argv[3])
preset, _ = models.resolve_preset(json.loads(sys.argv[1]).get("preset", "auto"), "cpu")
cfg = validate(TrainConfig(**json.loads(sys.argv[1])), preset=preset)
torch.manual_seed(cfg.seed)
ds = data.load(cfg.dataset)
res = models.model_resolution(preset, ds.resolution)
classes = int(ds.labels.max()) + 1 if cfg.conditional == "auto" and ds.labels is not None else 0
stream = data.BatchStream(data.resize(ds.images, res), cfg.batch_size, torch.device("cpu"), seed=cfg.seed,
                          labels=ds.labels if classes else None)
G, D = models.build(cfg.gan, preset, ds.channels, res, cfg.z_dim, classes)
G.to(memory_format=torch.channels_last)   # as core/train.py Loop does on CPU
D.to(memory_format=torch.channels_last)
opt_g = torch.optim.Adam(G.parameters(), lr=cfg.lr_g, betas=(cfg.beta1, cfg.beta2), fused=True)
opt_d = torch.optim.Adam(D.parameters(), lr=cfg.lr_d, betas=(cfg.beta1, cfg.beta2), fused=True)
gan_step = GanStep(G, D, opt_g, opt_d, losses.make_loss(cfg.gan, cfg.gp_weight), devices.Runtime(devices.probe("cpu")),
                   cfg.n_critic, cfg.z_dim, cfg.precision)
for _ in range(warmup):
    gan_step(stream)
t0 = time.perf_counter()
for _ in range(steps):
    gan_step(stream)
print("BENCH " + json.dumps({"steps_per_second": steps / (time.perf_counter() - t0)}), flush=True)
"""


def bare_loop_code(threads: int, prelude: str = "") -> str:
    """BARE_CHILD with torch at `threads` threads, and `prelude` run right after torch's import."""
    return BARE_CHILD.replace("import torch\n", f"import torch; torch.set_num_threads({threads})\n{prelude}", 1)


def _child_output(stdout: str) -> dict:
    for line in stdout.splitlines()[::-1]:
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError("child printed no result:\n" + stdout[-2000:])


def run_trainer(args: list[str], width: int | None = None, stop_when=None, timeout: float = 600,
                snapshots: str | None = None) -> dict:
    """Run `python -m core.train`-equivalent in a fresh process; return its events and timings.

    stop_when(event) -> True asks the run to stop (through the run directory, as the UI does),
    so tuning runs end as soon as digits appear.
    """
    from core.rundir import RunDir
    with tempfile.TemporaryDirectory(prefix="blink-bench-") as tmp:
        run_dir = os.path.join(tmp, "run")
        env = {**os.environ, "BLINK_RUNS_DIR": tmp}
        if width:
            env["BLINK_BENCH_WIDTH"] = str(width)
        if snapshots:
            env["BLINK_BENCH_SNAPSHOTS"] = snapshots
        launched = time.time()
        proc = subprocess.Popen([sys.executable, "-c", TRAINER_CHILD, *args, "--run-dir", run_dir], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        run, offset, events, stopped = RunDir(run_dir), 0, [], False
        while proc.poll() is None:
            time.sleep(0.25)
            new, offset = run.read_events(offset)
            events += new
            if stop_when and not stopped and any(stop_when(e) for e in new):
                run.request("stop")
                stopped = True
            if time.time() - launched > timeout:
                proc.kill()
        stdout = proc.stdout.read()
        new, offset = run.read_events(offset)
        events += new
        marks = _child_output(stdout)
        return {"events": events, "startup_seconds": marks["run_start"] - launched,
                "vm_hwm_mb": marks["vm_hwm_kb"] / 1024, "wall_seconds": time.time() - launched,
                "status": run.read_status().to_dict()}


def config_args(settings: dict) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]


def time_to_digits(settings: dict, seed: int, width: int | None = None, max_steps: int = 4000,
                   quality_every: int = 25) -> dict:
    """Seconds from launch to the first recognisable measurement (None if never within max_steps)."""
    from core.quality import recognizable

    def values(event):
        return {k[8:]: v for k, v in event.items() if k.startswith("quality_")}

    def hit(event):
        return bool(values(event)) and recognizable(values(event))

    out = run_trainer(config_args({**settings, "seed": seed, "steps": max_steps, "quality_every": quality_every}),
                      width=width, stop_when=hit)
    from core.config import TrainConfig
    default_every = TrainConfig().quality_every
    meter_seconds = 0.0
    curve = []
    for event in out["events"]:
        v = values(event)
        if not v:
            continue
        curve.append((event["step"], event["time"], v))
        if recognizable(v):
            train_seconds = event["time"] - meter_seconds
            # A default run measures every `default_every` steps: its meter time up to here counts.
            default_meter = (event["step"] // default_every) * statistics.median(c["seconds"] for _, _, c in curve)
            return {"seconds": out["startup_seconds"] + train_seconds + default_meter, "step": event["step"],
                    "startup_seconds": out["startup_seconds"], "train_seconds": train_seconds,
                    "meter_seconds": meter_seconds, "default_meter_seconds": default_meter, "values": v,
                    "curve": curve}
        meter_seconds += v.get("seconds", 0.0)
    return {"seconds": None, "step": None, "startup_seconds": out["startup_seconds"], "curve": curve,
            "status": out["status"].get("message")}


def trainer_vs_bare(steps: int, seed: int) -> dict:
    """Steady steps/s of the real trainer at default settings vs the bare loop, back to back."""
    from core.config import TrainConfig
    out = run_trainer(config_args({"seed": seed, "steps": steps}))
    logs = [e for e in out["events"] if "loss_d" in e]
    first = next(e for e in logs if e["step"] >= 25)       # past start-up and the first grid
    last = logs[-1]
    trainer = (last["step"] - first["step"]) / (last["time"] - first["time"])
    cfg = TrainConfig(seed=seed).to_dict()
    bare_steps = last["step"] - first["step"]
    proc = subprocess.run([sys.executable, "-c", BARE_CHILD, json.dumps(cfg), str(bare_steps), str(first["step"])],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    bare = _child_output(proc.stdout)["steps_per_second"]
    quality = [e for e in out["events"] if "quality_seconds" in e]
    return {"trainer": trainer, "bare": bare, "ratio": trainer / bare, "vm_hwm_mb": out["vm_hwm_mb"],
            "quality_measurements": len(quality),
            "quality_seconds": statistics.median(e["quality_seconds"] for e in quality) if quality else None}


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


def step_flops() -> tuple[int, dict]:
    """FLOPs of one default training step: the trainer's own step (core/step.py GanStep) on
    bundled MNIST, its optimizer updates included (FlopCounterMode counts the convolutions and
    matrix products, which are nearly all of it)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from core import data, devices, losses, models
    from core.config import TrainConfig, validate
    from core.step import GanStep
    preset, _ = models.resolve_preset(TrainConfig().preset, "cpu")
    cfg = validate(TrainConfig(), preset=preset)
    ds = data.load("bundled-mnist")
    classes = 10 if cfg.conditional == "auto" else 0     # bundled MNIST's labels
    G, D = models.build(cfg.gan, preset, 1, 28, cfg.z_dim, classes)
    stream = data.BatchStream(ds.images, cfg.batch_size, torch.device("cpu"), seed=0,
                              labels=ds.labels if classes else None)
    step = GanStep(G, D, torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters()),
                   losses.make_loss(cfg.gan, cfg.gp_weight), devices.Runtime(devices.probe("cpu")),
                   cfg.n_critic, cfg.z_dim, cfg.precision)
    with FlopCounterMode(display=False) as counter:
        step(stream)
    info = {"preset": preset, "classes": classes, "width": models.PRESET_WIDTH[preset], "batch": cfg.batch_size,
            "G_params": models.count_parameters(G), "D_params": models.count_parameters(D)}
    return counter.get_total_flops(), info


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 seed and shorter runs")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per figure (default 3, --quick 1)")
    parser.add_argument("--only", default="abcd", help="which figures, e.g. 'a' or 'bc'")
    parser.add_argument("--width", type=int, default=None, help="tuning: width of the 'fast' preset for (a)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="tuning: TrainConfig override for (a), e.g. --set batch_size=32")
    parser.add_argument("--max-steps", type=int, default=4000, help="(a): give up after this many steps")
    parser.add_argument("--b-steps", type=int, default=None, help="(b)/(c)/(d): trainer steps per run "
                        "(default 800, --quick 400)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in this process (c)")
    args = parser.parse_args()
    seeds = list(range(args.seeds or (1 if args.quick else 3)))
    settings = dict(kv.split("=", 1) for kv in args.set)

    import torch
    from core.config import TrainConfig
    if args.threads:
        torch.set_num_threads(args.threads)
    from core import models
    d = TrainConfig().resolved(models.resolve_preset(TrainConfig().preset, "cpu")[0])
    print(f"# Blink speed bench: {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"defaults: preset {d.preset} (fast width {models.PRESET_WIDTH['fast']}), gan {d.gan}, conditional "
          f"{d.conditional}, batch {d.batch_size}, "
          f"lr {d.lr_g}/{d.lr_d}, betas ({d.beta1}, {d.beta2}), n_critic {d.n_critic}, "
          f"quality_every {d.quality_every}; seeds {seeds}", flush=True)
    if settings or args.width:
        print(f"# tuning candidate: width {args.width or models.PRESET_WIDTH['fast']}, overrides {settings}")

    if "a" in args.only:
        results = []
        for seed in seeds:
            r = time_to_digits(settings, seed, width=args.width, max_steps=args.max_steps)
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
        print(f"(c) one step: {flops / 1e9:.3f} GFLOP (fwd+bwd of D on real+fake and G; {info}); "
              f"trainer {steps_s:.2f} steps/s -> {achieved:.1f} GFLOP/s achieved; fp32 mm 2048 peak {peak:.1f} GFLOP/s "
              f"(runs {[round(p, 1) for p in peaks]}) -> {achieved / peak:.1%} of peak", flush=True)


if __name__ == "__main__":
    main()
