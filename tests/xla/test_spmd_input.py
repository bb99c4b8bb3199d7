"""The input side of SPMD on 4 XLA:CPU devices: a prefetching BatchStream draws exactly the batches a
plain one draws, across state()/load_state() too, each batch sharded over the devices; device memory
in the status (the fullest device, and each device's); and a run on several hosts refused.

The XLA part runs this file as a child (the XLA runtime cannot start twice in one process) on tiny
4x4 batches: a few seconds, nothing compiled.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

pytestmark = pytest.mark.xla

BATCH, IMAGES = 8, 40   # 5 batches an epoch, 2 images per device


def test_prefetching_stream_draws_the_plain_streams_batches_sharded_over_four_devices():
    from tests.xla.xlahelpers import check, run_xla
    proc = check(run_xla([os.path.abspath(__file__)], timeout=300, CPU_NUM_DEVICES="4"))
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["prefetch_by_default"] is True
    assert result["shards"] == [[[BATCH // 4, 1, 4, 4]] * 4, [[BATCH // 4]] * 4]
    assert result["checks"] and all(result["checks"].values()), result["checks"]


def _child() -> None:
    """Draw from a plain and a prefetching stream on the 4-device mesh and say what matched."""
    import torch
    from core import devices, runtime
    from core.data.stream import BatchStream
    rt = runtime.Runtime(devices.probe("xla-cpu"))
    assert rt.device_count == 4, rt.device_count
    images = torch.randint(0, 256, (IMAGES, 1, 4, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(IMAGES) % 10

    def stream(prefetch):
        return BatchStream(images, BATCH, rt.device, seed=3, labels=labels, place=rt.to_device, prefetch=prefetch)

    def draw(s, n):   # the uint8 batches as they reached the devices, and their labels, back on the host
        out = []
        for _ in range(n):
            _, batch_labels = s.next_with_labels()
            out.append((s.last_batch.cpu(), batch_labels.cpu()))
        return out

    def same(a, b):
        return len(a) == len(b) and all(torch.equal(x, y) and torch.equal(u, v) for (x, u), (y, v) in zip(a, b))

    def same_state(a, b):
        return (a["epoch"], a["position"]) == (b["epoch"], b["position"]) and torch.equal(
            a["generator"], b["generator"]) and torch.equal(a["order"], b["order"])

    plain = stream(False)
    expected = draw(plain, 13)                       # 2 reshuffles (after batches 5 and 10)
    plain_states = {}
    for n in (5, 7):                                 # at an epoch's end (the next draw reshuffles), and mid-epoch
        replay = stream(False)
        draw(replay, n)
        plain_states[n] = replay.state()

    ahead = stream(True)
    checks = {"first 5": same(draw(ahead, 5), expected[:5])}
    at_5 = ahead.state()                             # the batch drawn ahead has reshuffled: state() must not say so
    checks["state at the epoch's end"] = same_state(at_5, plain_states[5])
    checks["next 2"] = same(draw(ahead, 2), expected[5:7])
    at_7 = ahead.state()
    checks["state mid-epoch"] = same_state(at_7, plain_states[7])
    checks["next 6"] = same(draw(ahead, 6), expected[7:13])
    for n, state in ((5, at_5), (7, at_7)):
        resumed = stream(True)                       # a resumed run's fresh stream
        resumed.load_state(state)
        checks[f"resumed from {n}"] = same(draw(resumed, 13 - n), expected[n:13])
    ahead.load_state(at_7)                           # a stream with a batch waiting, sent back
    checks["reloaded with a batch waiting"] = same(draw(ahead, 3), expected[7:10])

    _, batch_labels = ahead.next_with_labels()
    print(json.dumps({
        "prefetch_by_default": BatchStream(images, BATCH, rt.device, place=rt.to_device).prefetch,
        "shards": [rt.batch_shards(ahead.last_batch), rt.batch_shards(batch_labels)],
        "checks": checks}))


# ------------------------------------------------------------------------------------------
# Device memory in the status, and the multi-host refusal (no device needed)
# ------------------------------------------------------------------------------------------
def test_the_fullest_device_is_the_one_nearest_its_limit():
    from core.runtime import Runtime
    assert Runtime.fullest(None) is None and Runtime.fullest([]) is None
    assert Runtime.fullest([(5, 10)]) == (5, 10)
    # The most bytes is not the fullest: a device with less memory runs out first.
    assert Runtime.fullest([(60, 100), (9, 10), (70, 100), (0, 0)]) == (9, 10)


def test_status_shows_the_fullest_device_each_device_and_warns_when_one_is_nearly_full(tmp_path):
    from core import devices
    from core.config import TrainConfig
    from core.report import Reporter
    from core.rundir import RunDir
    from core.plan import plan_run
    from core.training import build_training
    training = build_training(plan_run(TrainConfig(steps=100), devices.probe("cpu")))
    run = RunDir(str(tmp_path))
    rt = training.rt
    report = Reporter(run, training, trainer_pid=os.getpid())
    rt.memory_per_device = lambda: [(2 << 30, 16 << 30), (15 << 30, 16 << 30)]   # as a runtime that can say
    report.write("running", "Training...", 1, 0, "", 0.0)
    status = run.read_status()
    diag = status.diagnostics
    assert (diag["memory_used"], diag["memory_total"]) == (15 << 30, 16 << 30)
    assert diag["memory_per_device"] == [[2 << 30, 16 << 30], [15 << 30, 16 << 30]]
    assert "94% full" in status.warning
    rt.memory_per_device = lambda: None              # XLA:CPU, or SPMD on torch_xla 2.9: nothing to say
    report.write("running", "Training...", 1, 0, "", 0.0)
    diag = run.read_status().diagnostics
    assert "memory_used" not in diag and "memory_per_device" not in diag


def test_a_run_on_more_than_one_host_is_refused_with_what_to_do():
    from core.devices import multi_host_refusal, slice_hosts
    assert multi_host_refusal(1) is None
    message = multi_host_refusal(2)
    assert "multi-host TPU slice is not supported" in message and "one host" in message
    assert "v5e-8" in message and "8 of its chips" in message
    # What torch_xla's TPU set-up reads, before its runtime starts (torch_xla/_internal/tpu.py).
    assert slice_hosts({}) == 1 and slice_hosts({"TPU_PROCESS_BOUNDS": "1,1,1"}) == 1
    assert slice_hosts({"TPU_WORKER_HOSTNAMES": "t1k-w-0,t1k-w-1,t1k-w-2,t1k-w-3"}) == 4
    assert slice_hosts({"TPU_HOST_BOUNDS": "2,2,1"}) == 4 and slice_hosts({"TPU_PROCESS_BOUNDS": "1,2,1"}) == 2


def test_train_refuses_a_slice_of_several_hosts_before_its_runtime_starts(tmp_path, monkeypatch):
    """As one host of a v5e-32 (4 hosts of 8 chips) sees it: refused in words, never waiting for the others."""
    from core import devices, runtime
    from core.config import TrainConfig
    from core.rundir import RunDir
    from core.train import train
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "w-0,w-1,w-2,w-3")
    monkeypatch.setattr(runtime, "Runtime", None)   # the runtime is never reached: nothing to start it with
    run_path = str(tmp_path / "run")
    os.makedirs(os.path.join(run_path, "grids"))
    tpu = devices.DeviceInfo("tpu", "TPU v5e (8 chips)", devices=8)
    from core.plan import plan_run
    assert train(plan_run(TrainConfig(device="tpu", steps=1), tpu), run_path, device_info=tpu) == "failed"
    status = RunDir(run_path).read_status()
    assert status.state == "failed" and status.message == devices.multi_host_refusal(4)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    _child()
