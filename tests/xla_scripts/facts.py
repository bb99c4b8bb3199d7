"""What one XLA:CPU device does with the project's parts, in one process (each XLA process pays
seconds to import torch_xla before it does anything): the gradient penalty against the CPU's, the
shipped generator's images, the bf16 autocast policy of every GAN type, the trainer's own step
compiling nothing new past the steps where Adam's bias corrections round to 1.0, and a compile
mid-run said in the run's status.

    python tests/xla_scripts/facts.py OUT.json SHIPPED_GENERATOR_DIR IMAGES.npy

The penalty runs first, so the host fallbacks read after it are its own; the other parts' compile
counts are compared within each part.
"""
import copy
import os
import sys

from _common import tiny_config, write_result   # the repo importable, PJRT_DEVICE=CPU


def compiles() -> int:
    import torch_xla.debug.metrics as met
    return (met.metric_data("CompileTime") or (0,))[0]


def gradient_penalty(dev) -> dict:
    """WGAN-GP's penalty and its gradients on XLA and on the CPU; then critic steps with the real
    loss (a fresh alpha from the XLA RNG every step), which must reuse one steady graph."""
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met
    from core import gans, losses, models
    torch.manual_seed(0)
    # The smallest critic (compile time grows with the graph), at PyTorch's default init: the
    # seed's N(0, 0.02) makes input-gradients so small that GP ~ 1 whatever the gradient is.
    D = models.Discriminator(1, 8, 4, norm="layer")
    g = torch.Generator().manual_seed(1)
    real, fake = torch.rand(4, 1, 8, 8, generator=g) * 2 - 1, torch.rand(4, 1, 8, 8, generator=g) * 2 - 1
    alpha = torch.rand(4, 1, 1, 1, generator=g)
    gp_cpu = losses.gradient_penalty(D, real, fake, alpha=alpha)
    gp_cpu.backward()
    Dx = copy.deepcopy(D).to(dev)
    for p in Dx.parameters():
        p.grad = None
    gp_xla = losses.gradient_penalty(Dx, real.to(dev), fake.to(dev), alpha=alpha.to(dev))
    gp_xla.backward()
    torch_xla.sync()

    def grad(p):   # a grad may be None (the last bias never reaches an input-gradient): zeros then
        return torch.zeros(p.shape) if p.grad is None else p.grad.cpu()
    grad_diff = max((grad(a) - grad(b)).abs().max().item() for a, b in zip(D.parameters(), Dx.parameters()))
    grad_scale = max(grad(a).abs().max().item() for a in D.parameters())
    loss_fn = losses.make_loss(gans.get("wgan-gp"))
    opt = torch.optim.Adam(Dx.parameters(), lr=1e-4, betas=(0.0, 0.9))
    counts = []
    for _ in range(3):
        loss, stats = loss_fn.discriminator_loss(Dx, real.to(dev), fake.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch_xla.sync()
        counts.append(compiles())
    return {"gp_cpu": gp_cpu.item(), "gp_xla": gp_xla.item(),
            "grad_diff": grad_diff, "grad_scale": grad_scale, "compiles": counts, "gp_last": stats["gp"].item(), "fallbacks": sorted(met.executed_fallback_ops())}


def shipped_images(dev, generator_dir: str, out: str) -> str:
    import numpy as np
    from core import sample
    generator, _ = sample.load_run_generator(generator_dir, device=dev)
    np.save(out, sample.generate(generator, sample.latents(3, 16, generator.z_dim)))
    return str(next(generator.parameters()).device)


def autocast_policy(rt) -> dict:
    """The dtypes the bf16 policy gives every conv and norm output and every loss (SEED_NOTES,
    "Mixed precision"): read from the lazy graph as it is traced, so nothing compiles."""
    import torch
    from torch import nn
    from core import gans, losses, models
    z_dim = tiny_config().resolved("fast").z_dim
    result = {"layers": {}, "losses": {}}
    for gan in ("dcgan", "wgan-gp", "hinge"):
        G, D = models.build(gans.get(gan), "fast", 1, 28, z_dim)
        G.to(rt.device), D.to(rt.device)
        seen: dict[str, set] = {}

        def hook(module, inputs, output):
            seen.setdefault(type(module).__name__, set()).add(str(output.dtype).replace("torch.", ""))
        for m in list(G.modules()) + list(D.modules()):
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.GroupNorm)):
                m.register_forward_hook(hook)
        loss = losses.make_loss(gans.get(gan))
        real = torch.rand(8, 1, 28, 28, device=rt.device) * 2 - 1
        z = torch.randn(8, z_dim, 1, 1, device=rt.device)
        with rt.autocast("bf16"):
            fake = G(z)
            loss_d, stats = loss.discriminator_loss(D, real, fake)
            loss_g, _ = loss.generator_loss(D, fake)
        loss_d.backward()   # the backward (double backward for WGAN-GP) must trace under the policy too
        result["layers"][gan] = {k: sorted(v) for k, v in seen.items()}
        result["losses"][gan] = {"generator_output": str(fake.dtype), "loss_d": str(loss_d.dtype),
                                 "loss_g": str(loss_g.dtype), **{k: str(v.dtype) for k, v in stats.items()},
                                 "bn_running_mean": sorted({str(m.running_mean.dtype) for m in G.modules()
                                                            if isinstance(m, nn.BatchNorm2d)})}
    return result


def compiles_settling(info, steps: int = 16, beta: float = 0.3) -> list[int]:
    """The trainer's setup and step (core/training.py) for DCGAN at preset fast, with both of Adam's
    betas at `beta`: 1 - 0.3**k is 1.0 in float32 from k = 15, so 16 updates cross every point where
    a Python float of the step would become a graph constant (torch_xla's special scalars): the
    compile count after every step. Then the compile counts around settings changed as the host
    changes them mid-run: {"settling": [...], "changed": {what: [before, 1 step, 2 steps after]}}."""
    from core.plan import plan_run
    from core.training import build_training
    training = build_training(plan_run(tiny_config(gan="dcgan", preset="fast", precision="fp32", batch_size=8,
                                                   beta1=beta, beta2=beta, steps=steps), info))
    counts = []

    def step() -> None:
        training.step()
        training.rt.mark_step()
        training.rt.synchronize()
        counts.append(compiles())
    for _ in range(steps):
        step()
    settled = list(counts)
    # The host changes the settings mid-run (core/config.py LIVE_FIELDS), two steps after each change.
    after = {}
    for name, change in (("rates", {"lr_d": 1e-3, "lr_g": 5e-4}), ("rates again", {"lr_d": 2e-3, "lr_g": 3e-4}),
                         ("beta1", {"beta1": 0.2})):
        training.change_settings(change)
        step()
        step()
        after[name] = counts[-3:]
    return {"settling": settled, "changed": after}


def compile_said_mid_run(info, folder: str) -> dict:
    """A run's status reads "running" and a new graph compiles (another GAN type's first step, as a
    grid's or the quality meter's graph does mid-run): the heartbeat, wired as the trainer wires it
    (core/train.py say_compiles), sees the compile begin and the status says so. Nothing else writes
    the status here, so what it says after the compile is what a viewer saw during it."""
    from core.heartbeat import Heartbeat
    from core.rundir import RunDir
    from core.train import say_compiles
    from core.plan import plan_run
    from core.training import build_training
    os.makedirs(folder, exist_ok=True)
    run = RunDir(folder)
    run.write_status("running", "Training...", step=16)
    training = build_training(plan_run(tiny_config(gan="hinge", batch_size=8), info))
    beat = Heartbeat(run).start()
    beat.stepped(16)
    say_compiles(beat, run, training.rt)
    training.step()
    training.rt.mark_step()
    training.rt.synchronize()
    beat.stop()
    status = run.read_status()
    return {"state": status.state, "message": status.message}


def main(out: str, generator_dir: str, images_out: str) -> None:
    import torch_xla
    from core import devices, runtime
    # The XLA device first: a CPU backward that starts autograd's engine before the XLA device
    # is registered leaves the engine without a queue for it (INTERNAL ASSERT device_ready_queues_).
    dev = torch_xla.device()
    result = {"penalty": gradient_penalty(dev), "images_device": shipped_images(dev, generator_dir, images_out)}
    info = devices.probe("xla-cpu")
    rt = runtime.Runtime(info)
    result.update(kind=rt.kind, autocast=autocast_policy(rt), compiles=compiles_settling(info),
                  said=compile_said_mid_run(info, os.path.join(os.path.dirname(out), "said")))
    write_result(out, result)


if __name__ == "__main__":
    main(*sys.argv[1:])
