"""`python app.py` as a ZeroGPU Space runs it, on a machine without a GPU: for the tests only.

The test sets what a Space sets (SPACES_ZERO_GPU=true, SPACES_ZERO_DEVICE_API_URL pointing at the
stand-in device API in device_api.py), so the real `spaces` package runs in its ZeroGPU mode: it
patches torch at import, reports the app's GPU function at launch, schedules each call over HTTP,
forks its worker and keeps it between calls. Two steps of its worker's start need a GPU, each
through torch._C._cuda_init(), which fails without an NVIDIA driver: `spaces.zero.torch.init(uuid)`
(CUDA on the granted device) and `spaces.zero.torch.move()` (the tensors the main process put on
"cuda" moved there, then a synchronize; Blink's UI process puts none there). Those two are set
aside here, in this process only, so each chunk's body runs on the CPU in the package's own forked
worker; and the GPU a chunk gets is described to the page as that CPU (app.chunks.zero_gpu_device),
so the plan the page makes is the one the worker can train. What this cannot prove: CUDA in a forked
worker, the package's moving of tensors to the GPU, a plan for a real ZeroGPU node (its preset and
precision), and a real node's timing (see DEPLOYING.md, "Run on a free ZeroGPU Space").

    SPACES_ZERO_GPU=true SPACES_ZERO_DEVICE_API_URL=http://127.0.0.1:PORT python tests/zerogpu/space.py --port 7860
"""
import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    import spaces.zero.torch as zero_torch   # ZeroGPU mode: the package patches torch here, as app.py's import would
    zero_torch.init = lambda nvidia_uuid: None
    zero_torch.move = lambda callback=None: None
    import app.chunks
    from core import devices
    zero_gpu_device = app.chunks.zero_gpu_device

    def this_cpu_as_the_chunks_gpu():
        cpu = devices.probe("cpu")
        cpu.notice = zero_gpu_device().notice
        return cpu
    app.chunks.zero_gpu_device = this_cpu_as_the_chunks_gpu
    sys.argv[0] = os.path.join(ROOT, "app.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
