"""The production step (core/step.py GanStep) on the real models and losses, trained with SPMD
over CPU_NUM_DEVICES=N XLA:CPU devices.

SPMD is the one multi-device mode that runs on XLA:CPU (launch-style collectives hang there):
one program, the batch sharded over a 1-D data mesh, XLA inserts the gradient reductions.
The only difference from the trainer's step is where the batch and the noise live: sharded.

    CPU_NUM_DEVICES=4 python spmd_train.py OUT.json GAN STEPS BATCH
"""
import math
import sys

from _common import write_result


def main(out, gan, steps, batch):
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.runtime as xr
    import torch_xla.distributed.spmd as xs
    xr.use_spmd()                               # before any device use
    from core import data, devices, losses, models
    from core.config import GAN_DEFAULTS
    from core.step import GanStep

    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("data", "model"))

    class ShardedStep(GanStep):
        """Each device gets batch/n of the real images and of the noise."""
        real_sharding = ""   # the first real batch's sharding spec, for the test to check

        def next_batch(self, batches):
            real, labels = super().next_batch(batches)
            xs.mark_sharding(real, mesh, ("data", None, None, None))
            self.real_sharding = self.real_sharding or torch_xla._XLAC._get_xla_sharding_spec(real)
            return real, labels

        def noise(self, count):
            z = super().noise(count)
            xs.mark_sharding(z, mesh, ("data", None, None, None))
            return z

    # The trainer's Runtime: under SPMD its xm.optimizer_step reduces nothing itself, XLA
    # inserts the gradient reductions.
    rt = devices.Runtime(devices.probe("xla-cpu"))
    torch_xla.manual_seed(0)
    batch = int(batch)
    G, D = models.build(gan, "fast", 1, 28, 100)
    G.to(rt.device), D.to(rt.device)
    hp = GAN_DEFAULTS[gan]
    opt_g = torch.optim.Adam(G.parameters(), lr=hp["lr_g"], betas=(hp["beta1"], hp["beta2"]))
    opt_d = torch.optim.Adam(D.parameters(), lr=hp["lr_d"], betas=(hp["beta1"], hp["beta2"]))
    step = ShardedStep(G, D, opt_g, opt_d, losses.make_loss(gan), rt, z_dim=100)
    stream = data.BatchStream(data.load("bundled-mnist").images, batch, rt.device, seed=0)
    history = []
    for _ in range(int(steps)):
        values = step(stream)
        torch_xla.sync()
        history.append([float(values["loss_d"]), float(values["loss_g"])])
    write_result(out, {"devices": n, "is_spmd": xr.is_spmd(), "real_sharding": step.real_sharding, "losses": history,
                       "finite": all(math.isfinite(v) for pair in history for v in pair)})


if __name__ == "__main__":
    main(*sys.argv[1:])
