"""Noise for a batch split over four XLA:CPU devices (Runtime.noise, each critic update's), with
every attempt to import jax or torchax counted: torch_xla 2.8's xs.mark_sharding tries both at each
call and logs "requires jax" when neither is there. The count through xs.mark_sharding itself is
printed beside it, so the watch is shown to see what it counts.

    CPU_NUM_DEVICES=4 python tests/xla_scripts/sharding_imports.py RESULT.json
"""
import importlib.abc
import sys

from _common import write_result   # the repo importable, PJRT_DEVICE=CPU

WATCHED = ("jax", "torchax")


class ImportWatch(importlib.abc.MetaPathFinder):
    """Counts the imports of WATCHED that reach the finders (a module not installed always does); finds nothing."""

    def __init__(self):
        self.tries = 0

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in WATCHED:
            self.tries += 1
        return None


def main(result_path: str) -> None:
    import torch_xla
    import torch_xla.distributed.spmd as xs
    from core import devices, runtime
    rt = runtime.Runtime(devices.probe("xla-cpu"))
    rt.noise(16, 8)   # the first call, and torch_xla's own first imports, before the watch
    torch_xla.sync()
    watch = ImportWatch()
    sys.meta_path.insert(0, watch)
    for _ in range(5):
        rt.noise(16, 8)
        torch_xla.sync()
    through_runtime = watch.tries
    for _ in range(5):
        xs.mark_sharding(rt.random_rows(__import__("torch").randn, 16, 8), rt.mesh, ("data", None))
    write_result(result_path, {"devices": rt.device_count, "through_runtime": through_runtime,
                               "through_mark_sharding": watch.tries - through_runtime})


if __name__ == "__main__":
    main(sys.argv[1])
