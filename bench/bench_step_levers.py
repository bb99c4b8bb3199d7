"""Speed levers for the default CPU step (issue 17), each against the step as it trains today.

    python bench/bench_step_levers.py compile     # bare loop, eager vs torch.compile(G), torch.compile(D)
    python bench/bench_step_levers.py layers      # the 1-channel layers: conv vs unfold/fold + matmul

compile: bench_speed.py's bare loop (2 threads, channels_last, fused Adam) in fresh processes,
eager then compiled (inductor, its cache in a temp folder: the first compile is what a cold
standby would pay), 200 timed steps after 30 warm-up steps; prints steps/s and the compile time.
layers: forward + backward of D's first conv (1 -> 32, 28x28) and G's last transposed conv
(32 -> 1, to 28x28) at batch 128, as torch runs them (contiguous and channels_last) and as
im2col matrix products (F.unfold / F.fold around one matmul), median of 30 after 5.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def compile_lever() -> None:
    from bench_speed import BARE_CHILD, _child_output
    from core.config import TrainConfig
    eager = BARE_CHILD.replace("import torch\n", "import torch; torch.set_num_threads(2)\n", 1)
    compiled = eager.replace("gan_step = GanStep(G, D,", "G, D = torch.compile(G), torch.compile(D)\n"
                             "compile_t0 = time.perf_counter()\ngan_step = GanStep(G, D,")
    compiled = compiled.replace("t0 = time.perf_counter()\nfor _ in range(steps):",
                                "print('compile and warm-up s', round(time.perf_counter() - compile_t0, 1))\n"
                                "t0 = time.perf_counter()\nfor _ in range(steps):")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-")}
    for name, code in (("eager", eager), ("compiled", compiled)):
        out = subprocess.run([sys.executable, "-c", code, json.dumps(TrainConfig().to_dict()), "200", "30"],
                             cwd=ROOT, capture_output=True, text=True, check=True, env=env).stdout
        extra = [line for line in out.splitlines() if line.startswith("compile")]
        print(f"{name}: {_child_output(out)['steps_per_second']:.2f} steps/s", *extra, flush=True)


def layers_lever() -> None:
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(2)

    def ms(fn, n=30):
        for _ in range(5):
            fn()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    def unfold_conv(x, w):      # Conv2d(1 -> 32, 4, 2, 1) as one matmul over 4x4 patches
        return (w.flatten(1) @ F.unfold(x, 4, padding=1, stride=2)).view(x.shape[0], w.shape[0], 14, 14)

    def fold_conv_transpose(h, w):   # ConvTranspose2d(32 -> 1, 4, 2, 1) as one matmul, then fold
        return F.fold(w.flatten(1).t() @ h.flatten(2), (28, 28), 4, padding=1, stride=2)

    w = torch.randn(32, 1, 4, 4, requires_grad=True)
    for needs_input_grad in (False, True):   # D on a real batch; D on a fake one for G's update
        x = torch.randn(128, 1, 28, 28).requires_grad_(needs_input_grad)
        x_cl = x.detach().to(memory_format=torch.channels_last).requires_grad_(needs_input_grad)
        w_cl = w.detach().to(memory_format=torch.channels_last).requires_grad_()
        print(f"D conv 1->32, input grad {needs_input_grad}: "
              f"conv2d {ms(lambda: F.conv2d(x, w, stride=2, padding=1).sum().backward()):.2f} ms, "
              f"channels_last {ms(lambda: F.conv2d(x_cl, w_cl, stride=2, padding=1).sum().backward()):.2f} ms, "
              f"unfold + matmul {ms(lambda: unfold_conv(x, w).sum().backward()):.2f} ms", flush=True)
    h = torch.randn(128, 32, 14, 14, requires_grad=True)
    h_cl = h.detach().to(memory_format=torch.channels_last).requires_grad_()
    print(f"G conv_transpose 32->1: "
          f"conv_transpose2d {ms(lambda: F.conv_transpose2d(h, w, stride=2, padding=1).sum().backward()):.2f} ms, "
          f"channels_last {ms(lambda: F.conv_transpose2d(h_cl, w, stride=2, padding=1).sum().backward()):.2f} ms, "
          f"matmul + fold {ms(lambda: fold_conv_transpose(h, w).sum().backward()):.2f} ms", flush=True)


if __name__ == "__main__":
    {"compile": compile_lever, "layers": layers_lever}[sys.argv[1] if len(sys.argv) > 1 else "layers"]()
