"""Run the real Loop in two legs on XLA:CPU and report compile counts after each.

Leg 1 (warm-up) meets every graph the loop has: first step (optimizers create their state),
steady step, log step, grid. Leg 2 repeats them all, so it must compile nothing new.

    python steady_compiles.py OUT.json RUN_DIR GAN N_CRITIC BATCH WARM MORE
"""
import math
import sys

from _common import tiny_config, write_result


def main(out, run_path, gan, n_critic, batch, warm, more):
    import os
    from core import devices
    from core.config import validate
    from core.rundir import RunDir
    from core.train import Loop

    info = devices.probe("xla-cpu")
    config = validate(tiny_config(gan=gan, n_critic=int(n_critic), batch_size=int(batch), steps=int(warm)),
                      device_caps=info.to_dict())
    os.makedirs(os.path.join(run_path, "grids"), exist_ok=True)
    run = RunDir(run_path)
    run.write_config(config)
    loop = Loop(config, run, info, False, None)
    loop.run()
    after_warm = loop.rt.compile_count()
    loop.config.steps = int(warm) + int(more)
    loop.run()
    events, _ = run.read_events()
    losses = [e[k] for e in events for k in ("loss_d", "loss_g") if k in e]
    write_result(out, {
        "kind": loop.rt.kind, "compiles_after_warm": after_warm, "compiles_after_more": loop.rt.compile_count(),
        "steps": loop.step_count, "fallback_ops": loop.rt.fallback_ops(),
        "losses_finite": bool(losses) and all(isinstance(v, float) and math.isfinite(v) for v in losses),
        "logged_steps": [e["step"] for e in events if "loss_d" in e],
        "status": run.read_status(),
    })


if __name__ == "__main__":
    main(*sys.argv[1:])
