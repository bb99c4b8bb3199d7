"""`python -m core.train ARGS` that also keeps what an experiment scores offline later.

    BLINK_LAB_SNAPSHOTS=DIR [BLINK_LAB_WIDTH=48] python lab/snapshot_trainer.py ARGS

The real CLI trainer, with two additions made here, in an experiment's own entry point (the
product has no hook for them): G's weights at every grid step (DIR/G_<step>.safetensors) and the
generator the run saved at every checkpoint (DIR/checkpoint_<step>/); BLINK_LAB_WIDTH sets the
'fast' preset's width for the candidate being tried.
"""
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from core import architecture, train  # noqa: E402
from core.rundir import GENERATOR_FILES  # noqa: E402

SNAPSHOTS = os.environ.get("BLINK_LAB_SNAPSHOTS")
_save_grid, _write_checkpoint = train.Loop.save_grid, train.Loop._write_checkpoint


def save_grid(loop):
    from safetensors.torch import save_file
    _save_grid(loop)
    state = {k: v.detach().cpu().contiguous() for k, v in loop.training.G.state_dict().items()}
    save_file(state, os.path.join(SNAPSHOTS, f"G_{loop.step_count:06d}.safetensors"),
              {"time": str(loop.report.elapsed()), "step": str(loop.step_count),
               "width": str(loop.training.G.spec.width)})


def write_checkpoint(loop):
    _write_checkpoint(loop)
    folder = os.path.join(SNAPSHOTS, f"checkpoint_{loop.step_count:06d}")
    os.makedirs(folder, exist_ok=True)
    for name in GENERATOR_FILES:
        shutil.copy(loop.run_dir.file(name), folder)


if __name__ == "__main__":
    if os.environ.get("BLINK_LAB_WIDTH"):
        architecture.PRESET_WIDTH["fast"] = int(os.environ["BLINK_LAB_WIDTH"])
    if SNAPSHOTS:
        train.Loop.save_grid, train.Loop._write_checkpoint = save_grid, write_checkpoint
    sys.exit(train.main(sys.argv[1:]))
