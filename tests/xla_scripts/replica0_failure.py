"""The real CLI trainer on XLA:CPU with a fault in work that only replica 0 does.

Saving the sample grid raises from step FAIL_FROM_STEP on. The run must end `failed` through
the control agreement (at the next log step, every replica together), keep its last good
checkpoint, and the trainer must exit: no replica may die alone and leave the others waiting.

    python replica0_failure.py --device xla-cpu ... --run-dir RUN_DIR   (core.train's flags)
"""
import sys

import _common  # noqa: F401  (repo on sys.path, PJRT_DEVICE=CPU)
from core.rundir import RunDir

FAIL_FROM_STEP = 4
_real_save_grid = RunDir.save_grid


def _failing_save_grid(self, images, step, columns=8):
    if step >= FAIL_FROM_STEP:
        raise OSError("simulated fault: the grid could not be written")
    return _real_save_grid(self, images, step, columns)


# At module level, not under __main__: torch_xla.launch's spawned worker runs this file's top
# level (as __mp_main__), so the fault reaches the replica process, where grids are written.
RunDir.save_grid = _failing_save_grid

if __name__ == "__main__":
    from core.train import main
    sys.exit(main(sys.argv[1:]))
