"""Train GAN_TYPE's setup and step (core/training.py, the trainer's own) on XLA:CPU past the steps
where Adam's bias corrections round to 1.0, and write the compile count after every step.

    python tests/xla_scripts/compiles_settle.py OUT GAN_TYPE PRESET PRECISION STEPS [BETA]

BETA (default 0.3) replaces both of Adam's betas: 1 - 0.3**k is 1.0 in float32 from k = 15, so 16
updates cross every point where a Python float of the step would become a graph
constant (torch_xla's special scalars). The type's own betas and n_critic are kept otherwise.
"""
import sys

from _common import tiny_config, write_result


def main(out: str, gan: str, preset: str, precision: str, steps: str, beta: str = "0.3") -> None:
    from core import devices
    from core.training import build_training, planned
    info = devices.probe("xla-cpu")
    training = build_training(*planned(tiny_config(gan=gan, preset=preset, precision=precision, batch_size=8,
                                                   beta1=float(beta), beta2=float(beta), steps=int(steps)), info))
    config = training.config
    compiles = []
    for _ in range(int(steps)):
        tensors = training.step()
        training.rt.mark_step()
        training.rt.synchronize()
        compiles.append(training.rt.compile_count())
    losses = {k: float(v) for k, v in tensors.items() if k.startswith("loss")}
    write_result(out, {"compiles": compiles, "n_critic": config.n_critic, "losses": losses,
                       "resolution": training.resolution, "precision": config.precision})


if __name__ == "__main__":
    main(*sys.argv[1:])
