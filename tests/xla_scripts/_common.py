"""Shared setup for the XLA helper scripts (each runs in its own process: the XLA runtime
cannot be re-initialised in-process, and torch_xla.launch refuses an initialised runtime)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("PJRT_DEVICE", "CPU")   # before torch_xla is imported


def write_result(path: str, result: dict) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def tiny_config(**overrides):
    """The smallest real config: bundled MNIST, preset fast at 28x28."""
    from core.config import TrainConfig
    values = dict(dataset="bundled-mnist", preset="fast", device="xla-cpu", batch_size=16, steps=4,
                  log_every=2, grid_every=2, checkpoint_every=1000, seed=0)
    values.update(overrides)
    return TrainConfig(**values)
