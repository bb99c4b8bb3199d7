"""Speed levers for the default CPU step (issue 17), each against the step as it trains today.

    python lab/bench_step_levers.py compile     # bare loop, eager vs torch.compile(G), torch.compile(D)
    python lab/bench_step_levers.py layers      # the 1-channel layers: conv vs unfold/fold + matmul
    python lab/bench_step_levers.py profile     # where the FLOP share goes: GFLOP/s per kind of op

compile: bench_speed.py's bare loop (2 threads, channels_last, fused Adam) in fresh processes,
eager then compiled (inductor, its cache in a temp folder: the first compile is what a cold
standby would pay), 200 timed steps after 30 warm-up steps; prints steps/s and the compile time.
layers: forward + backward of D's first conv (1 -> 32, 28x28) and G's last transposed conv
(32 -> 1, to 28x28) at batch 128, as torch runs them (contiguous and channels_last) and as
im2col matrix products (F.unfold / F.fold around one matmul), median of 30 after 5.
profile: the bare loop in a fresh process, 50 steps under torch.profiler (each op's own time on the
calling thread, which waits for its parallel work: per op, wall time) and one step under
FlopCounterMode; per kind of op (convolution forward, convolution backward, matrix products,
everything else) its GFLOP and ms per step, its GFLOP/s and that as a share of torch.mm's peak
measured in the same process; then 200 steps timed without the profiler for the whole step's share.
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
    """The bare loop (bench/bare_loop.py: the trainer's setup and step) eager and with G and D
    under torch.compile, each in a fresh process with its own inductor cache."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-")}
    for name, flags in (("eager", []), ("compiled", ["--compile"])):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bare_loop.py"), "--threads", "2",
                              "--steps", "200", "--warmup", "30", *flags], cwd=ROOT, capture_output=True, text=True,
                             check=True, env=env).stdout
        result = json.loads(out.strip().splitlines()[-1][6:])
        print(f"{name}: {result['steps_per_second']:.2f} steps/s, compile and warm-up "
              f"{result['warmup_seconds']:.1f} s", flush=True)


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


def profile_child() -> None:
    """In a fresh process: the trainer's default setup and step (core/training.py), profiled for
    50 steps, its FLOPs counted, then timed unprofiled; prints one PROFILE line."""
    import torch
    from torch.profiler import profile
    from bench_speed import counted_step, matmul_peak
    from core import devices
    from core.config import TrainConfig
    from core.plan import plan_run
    from core.training import build_training
    torch.set_num_threads(2)
    training = build_training(plan_run(TrainConfig(device="cpu"), devices.probe("cpu")))
    for _ in range(30):
        training.step()
    kinds = {"aten::mkldnn_convolution": "conv forward", "aten::_convolution": "conv forward",
             "aten::convolution_backward": "conv backward", "aten::mm": "matmul", "aten::addmm": "matmul"}
    with profile() as prof:
        for _ in range(50):
            training.step()
    ms: dict[str, float] = {}
    for event in prof.key_averages():
        kind = kinds.get(event.key, "everything else")
        ms[kind] = ms.get(kind, 0.0) + event.self_cpu_time_total / 1e3 / 50
    counter = counted_step(training)   # an ordinary step: FlopCounterMode cannot count the pairing's R1
    flops: dict[str, int] = {}
    for op, count in counter.get_flop_counts()["Global"].items():
        name = str(op).split(".")[1]
        kind = {"convolution": "conv forward", "convolution_backward": "conv backward"}.get(name, "matmul")
        flops[kind] = flops.get(kind, 0) + count
    peak = max(matmul_peak() for _ in range(3))
    steps = 200
    t0 = time.perf_counter()
    for _ in range(steps):
        training.step()
    print("PROFILE " + json.dumps({"ms": ms, "gflop": {k: v / 1e9 for k, v in flops.items()}, "peak": peak,
                                   "steps_per_second": steps / (time.perf_counter() - t0)}), flush=True)


def profile_lever() -> None:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "profile-child"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(next(line[8:] for line in out.splitlines() if line.startswith("PROFILE ")))
    peak, ms, gflop = result["peak"], result["ms"], result["gflop"]
    total_ms, total_gflop = sum(ms.values()), sum(gflop.values())
    print(f"fp32 torch.mm peak {peak:.0f} GFLOP/s; profiled step {total_ms:.1f} ms, {total_gflop:.2f} GFLOP")
    for kind in ("conv forward", "conv backward", "matmul", "everything else"):
        g, t = gflop.get(kind, 0.0), ms.get(kind, 0.0)
        rate = g / t * 1e3 if t else 0.0
        print(f"{kind:16s} {g:5.2f} GFLOP {t:6.1f} ms ({t / total_ms:5.1%} of the step) -> "
              f"{rate:6.1f} GFLOP/s = {rate / peak:5.1%} of peak")
    flop_ms = total_ms - ms.get("everything else", 0.0)
    print(f"if everything else took no time: {total_gflop / flop_ms * 1e3:.1f} GFLOP/s = "
          f"{total_gflop / flop_ms * 1e3 / peak:.1%} of peak")
    rate = result["steps_per_second"] * total_gflop
    print(f"unprofiled: {result['steps_per_second']:.2f} steps/s x {total_gflop:.2f} GFLOP = {rate:.1f} GFLOP/s "
          f"= {rate / peak:.1%} of peak")


if __name__ == "__main__":
    {"compile": compile_lever, "layers": layers_lever, "profile": profile_lever, "profile-child": profile_child}[sys.argv[1] if len(sys.argv) > 1 else "layers"]()
