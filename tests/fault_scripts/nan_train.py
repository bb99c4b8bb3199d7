"""`python -m core.train ARGS` with the batches of one step poisoned: a forced divergence through
the real trainer, its real divergence check and its real CLI, with no hook in production code.

    BLINK_FAULT_NAN_AT_STEP=N python tests/fault_scripts/nan_train.py ARGS

The patch is made at import (not under __main__): a process that "spawn" starts re-imports this
module as __mp_main__, so a trainer started from here is poisoned too. Step N (counted from the
run's start, so a resumed run past N is not poisoned again) trains on NaN images; the losses
become NaN and the loop ends the run at the next log step, as a real divergence would.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from core import train, training  # noqa: E402

POISONED_STEP = int(os.environ["BLINK_FAULT_NAN_AT_STEP"])


class PoisonedBatches:
    """The real batches, multiplied by NaN."""

    def __init__(self, stream):
        self.stream = stream

    def next_with_labels(self):
        batch, labels = self.stream.next_with_labels()
        return batch * float("nan"), labels


_real_step = training.Training.step


def step_with_poison(self, batches=None):
    if self.step_count + 1 != POISONED_STEP:   # step_count is incremented by the step
        return _real_step(self, batches)
    return _real_step(self, PoisonedBatches(self.stream))


training.Training.step = step_with_poison

if __name__ == "__main__":
    sys.exit(train.main())
