"""Compiles after warm-up: the CLI trainer (the program the page starts) on XLA:CPU, one run per
configuration, with the graph compilations and the seconds spent compiling at each log step.

Once the steps repeat no graph may compile again: on a TPU each new compile stalls the run for
seconds to minutes. The defaults cross the steps where Adam's bias corrections round to 1.0 in
float32 for each GAN type's own betas at the CPU preset (0.5**k, 0.9**k, 0.99**k under 2**-24: the
DCGAN fast preset's beta2 0.99 at about step 1,650, WGAN-GP's 0.9 with 5 critic updates a step at
about step 32, hinge's 0.9 at about step 157).

    python bench/bench_compiles.py                                  # each type at the CPU preset, fp32
    python bench/bench_compiles.py --configs dcgan:dcgan64:bf16 --steps 60 --beta 0.5   # a TPU's defaults, betas lowered
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
sys.path.insert(0, ROOT)
DEFAULT_CONFIGS = ("dcgan:fast:fp32:1700", "wgan-gp:fast:fp32:60", "hinge:fast:fp32:200")


def run(gan: str, preset: str, precision: str, steps: int, beta: float | None, devices: int) -> dict:
    folder = tempfile.mkdtemp(prefix="blink-compiles-")
    betas = ["--beta1", str(beta), "--beta2", str(beta)] if beta is not None else []
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "core.train", "--device", "xla-cpu", "--gan", gan, "--preset", preset,
                    "--precision", precision, "--steps", str(steps), "--batch-size", "8", "--log-every", "5",
                    "--grid-every", "1000", "--quality-every", "0", "--checkpoint-every", "100000", *betas,
                    "--run-dir", os.path.join(folder, "run")], cwd=ROOT, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    from core.rundir import RunDir
    trained = RunDir(os.path.join(folder, "run"))
    events = [e for e in trained.read_events()[0] if "xla_compiles" in e]
    status = trained.read_status()
    compiles = {e["step"]: e["xla_compiles"] for e in events}
    warm = [count for step, count in compiles.items() if step >= 10]
    return {"config": f"{gan}:{preset}:{precision}", "steps": steps, "beta": beta, "wall_s": round(wall, 1),
            "compile_s": status.diagnostics.get("compile_seconds"), "compiles_by_step": compiles,
            "new_after_step_10": warm[-1] - warm[0] if warm else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, help="GAN:PRESET:PRECISION[:STEPS]")
    parser.add_argument("--steps", type=int, default=60, help="steps of a config that names none")
    parser.add_argument("--beta", type=float, default=None, help="both Adam betas (default: the type's own)")
    parser.add_argument("--devices", type=int, default=1)
    args = parser.parse_args()
    for config in args.configs:
        gan, preset, precision, *steps = config.split(":")
        print(json.dumps(run(gan, preset, precision, int(steps[0]) if steps else args.steps, args.beta,
                             args.devices)), flush=True)


if __name__ == "__main__":
    main()
