"""`python -m core.train ARGS` that also keeps what an experiment scores offline later.

    BLINK_LAB_SNAPSHOTS=DIR [BLINK_LAB_WIDTH=48] [BLINK_LAB_D_WIDTH=16] python lab/snapshot_trainer.py ARGS

The real CLI trainer, with additions made here, in an experiment's own entry point (the
product has no hook for them): G's weights at every grid step (DIR/G_<step>.safetensors) and the
generator the run saved at every checkpoint (DIR/checkpoint_<step>/); BLINK_LAB_WIDTH sets the
'fast' preset's width for the candidate being tried, BLINK_LAB_D_WIDTH D's alone (G keeps the
preset's). From another lab script,
bench_speed.run_trainer(args, **trainer_keywords(DIR, width)) runs it.
"""
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def trainer_keywords(folder: str | None = None, width: int | None = None, **variables: str) -> dict:
    """bench_speed.run_trainer's keywords for this entry point: G at every grid step and the saved
    generator at every checkpoint kept in `folder` (None: nothing kept), optionally another width
    of the 'fast' preset, and any more of its variables (BLINK_LAB_D_WIDTH="16")."""
    env = {**({"BLINK_LAB_SNAPSHOTS": folder} if folder else {}),
           **({"BLINK_LAB_WIDTH": str(width)} if width else {}), **variables}
    return {"command": [sys.executable, os.path.abspath(__file__)], "env": env}


def keep_snapshots(folder: str) -> None:
    """Make the trainer's Loop also write G at every grid and copy the generator at every checkpoint."""
    from safetensors.torch import save_file
    from core import train
    from core.rundir import GENERATOR_FILES
    save_grid, write_checkpoint = train.Loop.save_grid, train.Loop._write_checkpoint

    def save_grid_and_g(loop):
        save_grid(loop)
        state = {k: v.detach().cpu().contiguous() for k, v in loop.training.G.state_dict().items()}
        save_file(state, os.path.join(folder, f"G_{loop.step_count:06d}.safetensors"),
                  {"time": str(loop.report.elapsed()), "step": str(loop.step_count),
                   "width": str(loop.training.G.spec.width)})

    def write_checkpoint_and_copy(loop):
        write_checkpoint(loop)
        kept = os.path.join(folder, f"checkpoint_{loop.step_count:06d}")
        os.makedirs(kept, exist_ok=True)
        for name in GENERATOR_FILES:
            shutil.copy(loop.run_dir.file(name), kept)

    train.Loop.save_grid, train.Loop._write_checkpoint = save_grid_and_g, write_checkpoint_and_copy


def set_discriminator_width(width: int) -> None:
    """Build every discriminator `width` wide, whatever the preset's width (G keeps it)."""
    from core import models
    build = models.Discriminator.__init__

    def at_width(self, channels, resolution, _preset_width, *rest, **keywords):
        build(self, channels, resolution, width, *rest, **keywords)

    models.Discriminator.__init__ = at_width


if __name__ == "__main__":
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from core import architecture, train
    if os.environ.get("BLINK_LAB_WIDTH"):
        architecture.PRESET_WIDTH["fast"] = int(os.environ["BLINK_LAB_WIDTH"])
    if os.environ.get("BLINK_LAB_D_WIDTH"):
        set_discriminator_width(int(os.environ["BLINK_LAB_D_WIDTH"]))
    if os.environ.get("BLINK_LAB_SNAPSHOTS"):
        keep_snapshots(os.environ["BLINK_LAB_SNAPSHOTS"])
    sys.exit(train.main(sys.argv[1:]))
