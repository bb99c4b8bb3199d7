"""Load a run's checkpoint and generator and sample 4 images: run where torch_xla cannot be
imported (the test puts a broken torch_xla first on PYTHONPATH). Prints both steps.

    python load_without_xla.py RUN_DIR
"""
import sys

import _common  # noqa: F401  (repo on sys.path)
from core import sample
from core.rundir import RunDir

run_path = sys.argv[1]
state = RunDir(run_path).load_checkpoint()
assert all(t.device.type == "cpu" for k in ("G", "D") for t in state[k].values())
G, meta = sample.load_run_generator(run_path)
images = sample.generate(G, sample.latents(0, 4, G.z_dim))
assert images.shape[0] == 4 and abs(images).max() <= 1.0 and images.std() > 0
assert "torch_xla" not in sys.modules
print(state["step"], meta["step"])
