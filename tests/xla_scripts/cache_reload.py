"""A graph compiled with the persistent compilation cache on, as a TPU run keeps it
(core/devices.py Runtime), then the counts Runtime.compile_cache reports: run twice on one cache
folder, the second process finds the graph there and cannot load it (XLA:CPU, like the TPU runtime
under torch_xla 2.8 and 2.9, does not implement deserialising an executable).

    python tests/xla_scripts/cache_reload.py CACHE_DIR RESULT.json
"""
import sys

from _common import write_result   # the repo importable, PJRT_DEVICE=CPU


def main(cache_dir: str, result_path: str) -> None:
    import torch
    import torch_xla.runtime as xr
    from core import devices, runtime
    xr.initialize_cache(cache_dir, readonly=False)   # what a TPU run does before any graph
    rt = runtime.Runtime(devices.probe("xla-cpu"))
    x = torch.ones(8, 8, device=rt.device)
    total = float((x @ x + 1).sum().cpu())
    write_result(result_path, {"total": total, "cache": rt.compile_cache()})


if __name__ == "__main__":
    main(*sys.argv[1:3])
