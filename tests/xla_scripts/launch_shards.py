"""torch_xla.launch over CPU_NUM_DEVICES=2 with NO collectives (they hang on XLA:CPU):
each replica reports what it sees (rank, world size, its data shard, its noise).

    CPU_NUM_DEVICES=2 python launch_shards.py OUT_DIR
"""
import os
import sys

from _common import ROOT, write_result  # noqa: F401  (sets sys.path and PJRT_DEVICE)


def replica(index, out_dir):
    import torch
    from core import data, devices
    info = devices.DeviceInfo("xla-cpu", "XLA:CPU", 2)
    rt = devices.Runtime(info)
    rt.seed(0)                      # same run seed everywhere: the rank must make the streams differ
    images = torch.arange(64, dtype=torch.uint8).reshape(64, 1, 1, 1).expand(64, 1, 4, 4).contiguous()
    stream = data.BatchStream(images, 8, rt.device, rt.rank, rt.world_size, seed=0)
    # Each image holds its own index as pixel value, so a batch tells which images it holds.
    seen = []
    for _ in range(stream.batches_per_epoch):
        batch = next(stream)
        seen += ((batch[:, 0, 0, 0] + 1) * 127.5).round().long().cpu().tolist()
    noise = torch.randn(4, device=rt.device).cpu().tolist()
    write_result(os.path.join(out_dir, f"rank{rt.rank}.json"), {
        "rank": rt.rank, "world_size": rt.world_size, "is_master": rt.is_master, "device": str(rt.device),
        "seen": seen, "noise": noise, "batch_shape": list(batch.shape)})


if __name__ == "__main__":
    import torch_xla
    torch_xla.launch(replica, args=(sys.argv[1],))
