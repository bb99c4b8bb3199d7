"""`python -m core.train ARGS` whose disk refuses every checkpoint after the first: the final
checkpoint of a run that ends well fails, through the real trainer and its real CLI.

    python tests/fault_scripts/final_checkpoint_failure.py ARGS
"""
import errno
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from core.rundir import RunDir  # noqa: E402

_real_save_checkpoint = RunDir.save_checkpoint
_saved = []


def _full_after_the_first(self, state):
    if _saved:
        raise OSError(errno.ENOSPC, "No space left on device")
    _saved.append(True)
    return _real_save_checkpoint(self, state)


RunDir.save_checkpoint = _full_after_the_first

if __name__ == "__main__":
    from core.train import main
    sys.exit(main(sys.argv[1:]))
