"""One GAN update: n_critic critic updates, then the generator's (pytorch/xla's `step_fn` beside its
loop). core/training.py's Training.step runs it between the learning rates and the EMA: that is
the step the trainer, the benches and the fault scripts run.

    step = GanStep(G, D, opt_g, opt_d, loss, rt, n_critic=1, z_dim=100, precision="fp32")
    tensors = step(batches)     # n_critic critic updates, then one generator update

`batches` is anything with next_with_labels() -> (images, labels or None), a core.data.BatchStream
in the trainer (under SPMD its batches arrive split over the devices). The step returns
tensors only (losses and the loss's stats, detached): reading them is the caller's choice, never an `.item()` inside the step. A variant (a bench's candidate)
overrides `noise` or `next_batch` rather than copying the step.
"""
from __future__ import annotations

import time


class GanStep:
    def __init__(self, G, D, opt_g, opt_d, loss, rt, n_critic: int = 1, z_dim: int = 100,
                 precision: str = "fp32"):
        """rt: the trainer's core.runtime.Runtime (autocast, gradient scaler, optimizer step)."""
        self.G, self.D, self.opt_g, self.opt_d, self.loss, self.rt = G, D, opt_g, opt_d, loss, rt
        self.n_critic, self.z_dim, self.precision = n_critic, z_dim, precision
        self.scaler_g = rt.make_scaler(precision)
        self.scaler_d = rt.make_scaler(precision)
        self.data_seconds = 0.0   # time spent waiting for batches: the trainer's data-wait share

    def next_batch(self, batches):
        t0 = time.perf_counter()
        real, labels = batches.next_with_labels()
        self.data_seconds += time.perf_counter() - t0
        return real, labels

    def noise(self, count: int):
        # Split over the devices (or the processes) like the real batch: each generates its own share.
        return self.rt.noise(count, self.z_dim, 1, 1)

    def __call__(self, batches, updates: str = "both") -> dict:
        """n_critic discriminator updates, then one generator update. Returns tensors only.
        updates: "both", or "d" / "g" for the host's Step of one net alone (the lesson's "let D
        learn alone and watch its verdicts move"): the other net's loss and stats are computed as
        always, for the charts, and the net is not updated (WGAN-GP's penalty needs its graph even then).

        The critic schedule is a Python loop over a fixed count, not a tensor condition, so
        XLA traces the same graph every step (fixed phases).
        """
        rt = self.rt
        for _ in range(self.n_critic if updates != "g" else 1):
            real, labels = self.next_batch(batches)
            with rt.autocast(self.precision):
                fake = self.G(self.noise(real.shape[0]), labels)   # a conditional G draws the real batch's classes
                loss_d, stats = self.loss.discriminator_loss(self.D, real, fake, labels)
            if updates != "g":
                self.opt_d.zero_grad(set_to_none=True)
                rt.backward_and_step(loss_d, self.opt_d, self.scaler_d)
        # The generator learns from the last critic step's fake batch, as in the seed's DCGAN.
        # D's weight gradients are not needed for G's update (D's next step starts from zero):
        # freezing D here skips computing them.
        self.D.requires_grad_(False)
        with rt.autocast(self.precision):
            loss_g, g_stats = self.loss.generator_loss(self.D, fake, labels)
        if updates != "d":
            self.opt_g.zero_grad(set_to_none=True)
            rt.backward_and_step(loss_g, self.opt_g, self.scaler_g)
        self.D.requires_grad_(True)
        return {"loss_d": loss_d.detach(), "loss_g": loss_g.detach(), **stats, **g_stats}
