"""The real models and losses trained with SPMD over CPU_NUM_DEVICES=N XLA:CPU devices.

SPMD is the one multi-device mode that runs on XLA:CPU (launch-style collectives hang there):
one program, the batch sharded over a 1-D data mesh, XLA inserts the gradient reductions.

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
    from core import data, losses, models
    from core.config import GAN_DEFAULTS

    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("data", "model"))
    dev = torch_xla.device()
    torch_xla.manual_seed(0)
    batch = int(batch)
    G, D = models.build(gan, "fast", 1, 28, 100)
    G.to(dev), D.to(dev)
    hp = GAN_DEFAULTS[gan]
    opt_g = torch.optim.Adam(G.parameters(), lr=hp["lr_g"], betas=(hp["beta1"], hp["beta2"]))
    opt_d = torch.optim.Adam(D.parameters(), lr=hp["lr_d"], betas=(hp["beta1"], hp["beta2"]))
    loss = losses.make_loss(gan)
    stream = data.BatchStream(data.load("bundled-mnist").images, batch, dev, seed=0)
    history, spec = [], ""
    for _ in range(int(steps)):
        real = next(stream)
        xs.mark_sharding(real, mesh, ("data", None, None, None))       # each device gets batch/n images
        z = torch.randn(batch, 100, 1, 1, device=dev)
        xs.mark_sharding(z, mesh, ("data", None, None, None))
        fake = G(z)
        loss_d, _ = loss.discriminator_loss(D, real, fake)
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()          # under SPMD xm.optimizer_step would be a no-op: XLA reduces the grads
        loss_g, _ = loss.generator_loss(D, fake)
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
        spec = spec or torch_xla._XLAC._get_xla_sharding_spec(real)
        torch_xla.sync()
        history.append([float(loss_d), float(loss_g)])
    write_result(out, {"devices": n, "is_spmd": xr.is_spmd(), "real_sharding": spec, "losses": history,
                       "finite": all(math.isfinite(v) for pair in history for v in pair)})


if __name__ == "__main__":
    main(*sys.argv[1:])
