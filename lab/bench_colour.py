"""A colour 64x64 folder on this machine's CPU: what the page shows 1, 2, 5 and 10 minutes after Start.

    python tools/build_benchmark_set.py --limit 1000
    python lab/bench_colour.py                        # 3 seeds x 10 minutes (~32 min)
    python lab/bench_colour.py --seeds 0 --minutes 2 --at 1 2 --grids /tmp/grids   # a smoke run

Each seed is one CLI trainer run (`python -m core.train`, bench_speed.run_trainer) at the page's
defaults on the benchmark set's 1,000 images (tools/build_benchmark_set.py: 64x64 RGB emoji in 9
class folders), for --steps (5,000: what a user sizes to about 10 minutes here, so the default
second-half learning-rate decay falls where it would), stopped through the run directory --minutes
into its training. At each --at minute of training time it reports the steps done and steps/s,
the trainer's own colour meter at its last reading (core/quality.py SwdMeter: the sliced
Wasserstein distance of the fakes' small patches against the set's, x1e3, lower is better; every
--every steps), and the line the page shows (core/phase.py, over the run's events so far). With
--grids DIR it writes DIR/seed<S>.png: the run's fixed-noise grids at those minutes side by side,
labelled, in whole pixels (the page's grid is these images).

Run it on a quiet machine: these are seconds, not steps.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

DEFAULT_SET = os.path.expanduser("~/.cache/blink/benchmark/noto-emoji-1000")


def number(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def at_minutes(events: list[dict], minutes: list[float], gan: str, conditional: bool) -> list[dict]:
    """For each minute mark: steps done, the last meter reading and the page's line by then."""
    from core.phase import Phase
    rows = []
    for minute in minutes:
        upto = [e for e in events if e["time"] <= minute * 60]
        if not upto or upto[-1]["time"] < minute * 60 - 30:   # the run ended (or stalled) before this mark
            rows.append(None)
            continue
        quality = [e for e in upto if "quality_swd" in e]
        step = max(e["step"] for e in upto)
        rows.append({"minute": minute, "step": step, "steps_per_second": step / (minute * 60),
                     "swd": quality[-1]["quality_swd"] if quality else None,
                     "swd_step": quality[-1]["step"] if quality else None,
                     "augment_p": next((e["augment_p"] for e in reversed(upto) if "augment_p" in e), None),
                     "phase": Phase(gan, conditional, upto).line()})
    return rows


def grid_strip(run_dir: str, rows: list[dict], out: str) -> None:
    """The grids nearest before each minute mark, side by side under their minute, in whole pixels."""
    from PIL import Image, ImageDraw
    from core.rundir import RunDir
    grids = RunDir(run_dir).grids()
    picked = [max((g for g in grids if g[0] <= row["step"]), default=grids[0]) for row in rows if row]
    images = [Image.open(path).convert("RGB") for _, path in picked]
    w, h = images[0].size
    strip = Image.new("RGB", (len(images) * (w + 8), h + 18), "white")
    draw = ImageDraw.Draw(strip)
    for i, (image, row, (step, _)) in enumerate(zip(images, [r for r in rows if r], picked)):
        strip.paste(image, (i * (w + 8), 18))
        draw.text((i * (w + 8) + 2, 2), f"{row['minute']:g} min (step {step})", fill="black")
    strip.save(out)


def main() -> None:
    from bench_speed import run_trainer
    from snapshot_trainer import trainer_keywords
    from core.config import TrainConfig
    from core.rundir import RunDir
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-path", default=DEFAULT_SET)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--at", type=float, nargs="+", default=[1, 2, 5, 10])
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--every", type=int, default=100, help="steps between meter readings")
    ap.add_argument("--grids", help="a folder for each seed's grids at the minute marks")
    ap.add_argument("--lab-env", nargs="*", default=[], metavar="KEY=VALUE",
                    help="train with lab/snapshot_trainer.py and these variables, e.g. BLINK_LAB_D_WIDTH=16")
    ap.add_argument("--set", nargs="*", default=[], metavar="FLAG=VALUE", help="more core.train flags, e.g. batch-size=64")
    args = ap.parse_args()
    if not os.path.isdir(args.data_path):
        sys.exit(f"{args.data_path} is missing: python tools/build_benchmark_set.py --limit 1000")
    # The lab's entry point where a variable of its is asked for, else the CLI's.
    trainer = trainer_keywords(**dict(item.split("=", 1) for item in args.lab_env)) if args.lab_env else {}
    extra = [part for item in args.set for part in (f"--{item.split('=', 1)[0]}", item.split("=", 1)[1])]
    table, said = {}, ""
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="blink-colour-") as tmp:
            run_dir = os.path.join(tmp, "run")
            result = run_trainer(["--dataset", "folder", "--data-path", args.data_path, "--seed", str(seed),
                                  "--steps", str(args.steps), "--quality-every", str(args.every), *extra],
                                 stop_when=lambda e: e.get("time", 0) >= args.minutes * 60,
                                 timeout=args.minutes * 60 + 300, keep=run_dir, **trainer)
            status = result["status"]
            said = f"{status['preset']} model {status['resolution']}x{status['resolution']}, augmentation {status['augment']}"
            table[seed] = at_minutes(result["events"], args.at, status["gan"] or TrainConfig().gan, status["classes"] > 0)
            if args.grids:
                os.makedirs(args.grids, exist_ok=True)
                grid_strip(run_dir, table[seed], os.path.join(args.grids, f"seed{seed}.png"))
                shutil.copy(os.path.join(RunDir(run_dir).grids_folder, RunDir.REAL_GRID), args.grids)
        print(f"seed {seed}: start-up {result['startup_seconds']:.1f} s; " + "; ".join(
            f"{r['minute']:g} min: step {r['step']}, swd {number(r['swd'])}, augmented "
            f"{'-' if r['augment_p'] is None else format(r['augment_p'], '.0%')}, "
            f"'{r['phase']}'" for r in table[seed] if r),
            flush=True)
    print(f"\n{os.path.basename(args.data_path)}, {said}; seeds {args.seeds}\n")
    print("| minutes | steps/s | steps | patch distance (swd), per seed | median |")
    print("|---|---|---|---|---|")
    for i, minute in enumerate(args.at):
        rows = [table[s][i] for s in args.seeds if table[s][i]]
        if not rows:
            continue
        swd = [r["swd"] for r in rows]
        read = [v for v in swd if v is not None]
        print(f"| {minute:g} | {statistics.median(r['steps_per_second'] for r in rows):.2f} | "
              f"{statistics.median(r['step'] for r in rows):.0f} | {', '.join(map(number, swd))} | "
              f"{number(statistics.median(read) if read else None)} |")


if __name__ == "__main__":
    main()
