"""Record the dtypes the bf16 policy produces on an XLA device, for every layer and loss.

Policy (SEED_NOTES, "Mixed precision"): convolutions in bf16; BatchNorm and losses in fp32.
Forward hooks record each conv / norm output dtype. Dtypes are known when the lazy graph is
traced, so nothing is compiled or run: the script costs seconds, not minutes.

    python autocast_policy.py OUT.json
"""
import sys

from _common import tiny_config, write_result


def main(out):
    import torch
    from torch import nn
    from core import devices, losses, models

    info = devices.probe("xla-cpu")
    rt = devices.Runtime(info)
    from core.config import validate
    cfg = validate(tiny_config(), preset="fast")
    result = {"kind": rt.kind, "layers": {}, "losses": {}}
    for gan in ("dcgan", "wgan-gp", "hinge"):
        G, D = models.build(gan, "fast", 1, 28, cfg.z_dim)
        G.to(rt.device), D.to(rt.device)
        seen: dict[str, set] = {}

        def hook(module, inputs, output):
            seen.setdefault(type(module).__name__, set()).add(str(output.dtype).replace("torch.", ""))
        for m in list(G.modules()) + list(D.modules()):
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.GroupNorm)):
                m.register_forward_hook(hook)
        loss = losses.make_loss(gan)
        real = torch.rand(8, 1, 28, 28, device=rt.device) * 2 - 1
        z = torch.randn(8, cfg.z_dim, 1, 1, device=rt.device)
        with rt.autocast("bf16"):
            fake = G(z)
            loss_d, stats = loss.discriminator_loss(D, real, fake)
            loss_g, _ = loss.generator_loss(D, fake)
        loss_d.backward()   # the backward (double backward for WGAN-GP) must trace under the policy too
        result["layers"][gan] = {k: sorted(v) for k, v in seen.items()}
        result["losses"][gan] = {"generator_output": str(fake.dtype), "loss_d": str(loss_d.dtype),
                                 "loss_g": str(loss_g.dtype),
                                 **{k: str(v.dtype) for k, v in stats.items()},
                                 "bn_running_mean": sorted({str(m.running_mean.dtype) for m in G.modules()
                                                            if isinstance(m, nn.BatchNorm2d)})}
    write_result(out, result)


if __name__ == "__main__":
    main(*sys.argv[1:])
