"""The real CLI trainer on XLA:CPU with a fault in its bookkeeping: saving the grid raises from
step 4. The run must end `failed` with what it was doing, keep its last good checkpoint, and exit.

    python grid_failure.py --device xla-cpu ... --run-dir RUN_DIR   (core.train's flags)
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


RunDir.save_grid = _failing_save_grid

if __name__ == "__main__":
    from core.train import main
    sys.exit(main(sys.argv[1:]))
