"""What a run trains: the data, the nets, their optimizers and the one step, built once.

    training = build_training(plan)            # the plan's data loaded and checked (core/plan.py), the nets built
    tensors = training.step()                  # one generator update: learning rates, GanStep, EMA
    training.checkpoint_state()                # what a checkpoint holds; load_checkpoint_state() restores it

The trainer (core/train.py Loop), the benches, the device check and the fault scripts all build
with this function and run this step, so what they time or break is what trains. It touches no
run directory: the Loop adds the files, the status and the stop and pause decisions around it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from core.architecture import grid_columns
from core.config import LIVE_FIELDS, TrainConfig
from core.plan import DataFacts, Plan
from core.step import GanStep

GRID_SIZE = 64        # the seed's 64 fixed noise vectors


def lr_factor(step: int, steps: int, decay_start: float) -> float:
    """The learning rates' share of the config's for the update after `step` updates of a
    `steps`-long run: 1 until decay_start x steps, then falling linearly to 1 / (the decay's
    length) for the last update, never 0 (CycleGAN's schedule at decay_start 0.5)."""
    start = int(decay_start * steps)
    if step < start:
        return 1.0
    return (steps - step) / (steps - start)


@dataclass
class Training:
    plan: Plan
    rt: Any                      # core.runtime.Runtime
    G: Any
    D: Any
    opt_g: Any
    opt_d: Any
    gan_step: GanStep
    stream: Any                  # core.data.BatchStream
    dataset: Any                 # core.data.ImageSet: the quality meter's real images
    fixed_noise: Any             # the grid's latents, on the CPU (what checkpoints keep)
    ema: Any = None              # core.ema.WeightAverage, or None: G_sampled is G
    real_grid: Any = None        # uint8 real images laid out as the grid's fakes (a class per column), CPU
    augmented: Any = None        # the core.augment.Augmented D that GanStep trains, or None
    matmul_precision: str | None = None
    data_load_seconds: float = 0.0
    step_count: int = 0
    fixed_noise_device: Any = field(default=None, repr=False)

    # What the plan settled, as the loop and the checkpoints read it.
    @property
    def config(self) -> TrainConfig:
        return self.plan.config

    @property
    def resolution(self) -> int:
        return self.plan.resolution

    @property
    def classes(self) -> int:
        return self.plan.classes

    @property
    def class_names(self) -> list[str]:
        """What class i is where the dataset names its classes (a folder's subfolders); [] for
        unnamed classes (MNIST's digits are their indices) and unconditional runs."""
        return list(self.plan.class_names)

    @property
    def grid_columns(self) -> int:
        """A conditional G's grid has a whole number of columns a class (0-9 for digits: one each)."""
        return grid_columns(self.classes)

    @property
    def G_sampled(self):
        """What every viewer sees (grids, the quality meter, the generator file): the moving
        average of G's weights when config.ema > 0 (core/ema.py), else G."""
        return self.ema.module if self.ema else self.G

    def step(self, batches=None, updates: str = "both") -> dict:
        """One generator update (with its critic updates) at this step's learning rates, then the
        average of G's weights, in the same graph on XLA; tensors only. batches: the stream by
        default (a fault script hands in poisoned ones). updates: "d" or "g" for the host's Step of
        one net alone (core/step.py); it counts as a step of the run all the same."""
        cfg = self.config
        self.set_learning_rates(lr_factor(self.step_count, cfg.steps, cfg.lr_decay_start))
        tensors = self.gan_step(batches or self.stream, updates)
        if self.ema and updates != "d":
            self.ema.update()
        if self.augmented is not None:   # how often D's images are augmented now (a copy: p moves on)
            tensors["augment_p"] = self.augmented.p.detach().clone()
        self.step_count += 1
        return tensors

    def set_learning_rates(self, factor: float) -> None:
        """Both optimizers at factor x the config's rates, every step (so a loaded optimizer state's
        rates never linger). A Python float in param_groups: on XLA a changing value becomes device
        data, not a new graph (notes/torch_xla.md), unless it is 0 (a constant there), which
        lr_factor never returns."""
        for optimizer, lr in ((self.opt_g, self.config.lr_g), (self.opt_d, self.config.lr_d)):
            for group in optimizer.param_groups:
                group["lr"] = lr * factor

    def change_settings(self, settings: dict, step: int | None = None) -> dict:
        """Train on with `settings` (LIVE_FIELDS) from the next step, through a new plan (its checks:
        ConfigError naming the field): the rates (set_learning_rates reads the plan every step), the
        betas in both optimizers, the critic updates in the step. step: kept in the plan's history as
        taking effect after it (None: the history holds it already). Returns what changed."""
        changed = {name: value for name, value in settings.items()
                   if name not in LIVE_FIELDS or getattr(self.config, name) != value}
        if changed:
            self.plan = self.plan.changed(step, changed) if step is not None else self.plan.replan(**changed)
        self.follow_plan()
        return changed

    def follow_plan(self) -> None:
        """The optimizers and the step as the plan's settings say (after a change, or a resume's plan)."""
        for optimizer in (self.opt_g, self.opt_d):
            for group in optimizer.param_groups:
                group["betas"] = (self.config.beta1, self.config.beta2)
        self.gan_step.n_critic = self.config.n_critic

    def verdicts(self, fakes):
        """D's output on the grid's fakes and on the real grid, each image with its column's class:
        a (2, n) tensor, fakes first, as the GAN type's `verdict` says (a probability is the sigmoid
        of D's logit); the caller holds no_grad. Nothing of D changes.

        A BatchNorm D judges as it does in training: each set as a batch of its own, on its own
        statistics (its running averages are no judge: D never uses them, and on them it called
        every real digit fake), with those averages put back afterwards. Any other D judges in
        eval mode, where spectral norm's estimate stays as training left it."""
        import torch
        from core.images import to_model_range
        from core.models import default_labels
        n = len(fakes)
        real = to_model_range(self.real_grid.to(self.rt.device))
        labels = default_labels(n, self.classes, self.rt.device) if self.classes else None
        norms = [m for m in self.D.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        kept = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in norms]
        self.D.train(bool(norms))
        try:
            scores = torch.stack([self.D(fakes.to(real.dtype), labels), self.D(real, labels)]).float()
        finally:
            self.D.train()
            for m, (mean, var, count) in zip(norms, kept):
                m.running_mean.copy_(mean)
                m.running_var.copy_(var)
                m.num_batches_tracked.copy_(count)
        verdict = self.plan.gan.verdict
        if verdict == "pair":   # D's own question: which of a real and a fake image is the real one
            return torch.sigmoid(scores - scores.mean(dim=1, keepdim=True).flip(0))
        return torch.sigmoid(scores) if verdict == "probability" else scores

    # ---- checkpoints: replicated weights (SPMD included) come to the host whole ----------
    def checkpoint_state(self) -> dict:
        rt, step = self.rt, self.gan_step
        g_state = rt.cpu_state_dict(self.G)
        return {
            "version": 1, "config": self.config.to_dict(), "plan": self.plan.to_dict(), "step": self.step_count,
            "G": g_state, "D": rt.cpu_state_dict(self.D),
            "opt_g": _cpu(self.opt_g.state_dict()), "opt_d": _cpu(self.opt_d.state_dict()),
            "scaler_g": step.scaler_g.state_dict() if step.scaler_g else None,
            "scaler_d": step.scaler_d.state_dict() if step.scaler_d else None,
            "fixed_noise": self.fixed_noise,
            # What makes a resumed run draw the batches and noise an unbroken one would have.
            "random": {"device": rt.rng_state(), "stream": self.stream.state()},
            **({"G_ema": rt.cpu_state_dict(self.ema.module)} if self.ema else {}),
            **({"augment": self.augmented.state()} if self.augmented is not None else {}),
            **({"loss": step.loss.state()} if hasattr(step.loss, "state") else {}),   # a loss that counts its updates
        }

    def load_checkpoint_state(self, state: dict) -> None:
        """Continue from a checkpoint saved with this config (the caller checks that)."""
        self.G.load_state_dict(state["G"])
        self.D.load_state_dict(state["D"])
        self.opt_g.load_state_dict(state["opt_g"])
        self.opt_d.load_state_dict(state["opt_d"])
        if self.ema:   # a checkpoint saved before EMA sampling starts the average from its G
            self.ema.load(state.get("G_ema", state["G"]), state["step"])
        for scaler, key in ((self.gan_step.scaler_g, "scaler_g"), (self.gan_step.scaler_d, "scaler_d")):
            if scaler is not None and state.get(key):
                scaler.load_state_dict(state[key])
        if self.augmented is not None and "augment" in state:   # saved before adaptive augmentation: p from 0
            self.augmented.load_state(state["augment"])
        if "loss" in state:   # a checkpoint saved before the loss's count travelled counts from the resume
            self.gan_step.loss.load_state(state["loss"])
        self.fixed_noise = state["fixed_noise"]
        self.fixed_noise_device = self.fixed_noise.to(self.rt.device)
        self.step_count = state["step"]
        if "random" in state:   # saved before checkpoints kept it: the resumed run draws from its seed again
            self.rt.set_rng_state(state["random"]["device"])
            self.stream.load_state(state["random"]["stream"])


def load_data(plan: Plan, progress=None, device=None):
    """The plan's dataset, decoded and cached once (core.data.load), checked against the facts the
    plan was made from, and the trainer's `device` against the plan's: ConfigError, in words, when
    either changed since Start."""
    from core import data
    config = plan.config
    dataset = data.load(config.dataset, config.data_path, max_mb=config.max_image_mb, progress=progress)
    plan.check(DataFacts.of(dataset), device)
    return dataset


def build_training(plan: Plan, dataset=None, rt=None) -> Training:
    """Everything a run of `plan` trains, on its device, seeded. dataset: its data as load_data
    gives it (None: loaded here); rt: the device's Runtime when the caller has one already."""
    from core import data, losses, runtime
    from core.augment import Augmented
    from core.ema import WeightAverage

    config, info = plan.config, plan.device
    dataset = dataset if dataset is not None else load_data(plan)
    rt = rt or runtime.Runtime(info)
    rt.seed(config.seed)
    matmul_precision = rt.set_matmul_precision(config.precision)

    t0 = time.perf_counter()
    images = data.resized(dataset, plan.resolution)
    labels = dataset.labels if plan.classes else None
    # The global batch's order from the seed, alike in every process; each takes its own rows of it.
    stream = data.BatchStream(images, config.batch_size, rt.device, config.seed,
                              keep_on_device=info.is_cuda, labels=labels, place=rt.to_device,
                              rows=rt.local_part)
    data_load_seconds = dataset.load_seconds + time.perf_counter() - t0

    G, D, opt_g, opt_d = _nets(plan, dataset.channels, rt)
    fixed_noise, real_grid = _fixed_grids(plan, images, labels)
    # D trains on augmented images (both D's and G's steps); the checkpoint and the verdicts keep D itself.
    # Adaptive where D's logits have a sign to read (core/augment.py; the GAN type's row says).
    # Under DDP the step trains the nets wrapped (rt.wrap), augmentation outside D's wrap: its p is
    # the run's, kept alike in every process.
    D_wrapped = rt.wrap(D)
    augmented = (Augmented(D_wrapped, adaptive=plan.gan.adaptive_augment, average=rt.average,
                           processes=rt.processes) if plan.augment else None)
    D_trained = augmented if augmented is not None else D_wrapped
    loss = losses.make_loss(plan.gan, config.gp_weight, rt.random_rows)
    gan_step = GanStep(rt.wrap(G), D_trained, opt_g, opt_d, loss, rt, config.n_critic, config.z_dim, config.precision)

    return Training(plan=plan, rt=rt, G=G, D=D, opt_g=opt_g, opt_d=opt_d, gan_step=gan_step, stream=stream,
                    dataset=dataset, fixed_noise=fixed_noise,
                    ema=WeightAverage(G, config.ema) if config.ema else None, matmul_precision=matmul_precision,
                    augmented=augmented, data_load_seconds=data_load_seconds,
                    fixed_noise_device=fixed_noise.to(rt.device), real_grid=real_grid)


def _nets(plan: Plan, channels: int, rt):
    """G and D of the plan's type and size on rt's device, and their Adam optimizers."""
    import torch
    from core import devices, models
    config, info = plan.config, plan.device
    G, D = models.build(plan.gan, config.preset, channels, plan.resolution, config.z_dim, plan.classes)
    G, D = rt.sync_batch_norms(G), rt.sync_batch_norms(D)   # under DDP: BatchNorm over the global batch
    G.to(rt.device)
    D.to(rt.device)
    if info.kind in devices.DDP_KINDS:
        # NHWC convolutions: tensor cores prefer them, and oneDNN runs this model's CPU steps
        # faster in them (lab/README.md, "Step speed: levers measured").
        G.to(memory_format=torch.channels_last)
        D.to(memory_format=torch.channels_last)
    betas = (config.beta1, config.beta2)
    # One fused kernel for all of a net's parameters (CPU and CUDA; XLA fuses on its own). On XLA
    # the step count and Adam's bias corrections stay on the device (capturable): as Python floats
    # they become graph constants once they round to 1.0, and the step recompiled mid-run
    # (torch_xla's IsSpecialScalar; bench/README.md, "Compiles after warm-up"): a stall on a TPU.
    fused = {"fused": True} if not info.is_xla else {"capturable": True}
    opt_g = torch.optim.Adam(G.parameters(), lr=config.lr_g, betas=betas, **fused)
    opt_d = torch.optim.Adam(D.parameters(), lr=config.lr_d, betas=betas, **fused)
    return G, D, opt_g, opt_d


def _fixed_grids(plan: Plan, images, labels):
    """The grid's fixed noise and its real images, both from the run's seed, drawn on the CPU: the
    same grid on any device, and the run's own random numbers untouched. A conditional G's grid has
    a whole number of columns a class, so its rows are GRID_SIZE rounded down to whole rows (6 rows
    of 10 for MNIST, 7 of 9 for three classes), and in place i its real image is of class i mod
    classes (the grid's column); a set smaller than the grid repeats its images."""
    import torch
    seed, classes = plan.config.seed, plan.classes
    columns = grid_columns(classes)
    cpu_noise = torch.Generator().manual_seed(seed)
    fixed_noise = torch.randn(GRID_SIZE, plan.config.z_dim, 1, 1, generator=cpu_noise)[:GRID_SIZE // columns * columns]
    n = len(fixed_noise)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed + 7919))
    if labels is None:
        return fixed_noise, images[order[torch.arange(n) % len(order)]].clone()
    by_class = [order[labels[order] == c] for c in range(classes)]
    picks = [by_class[i % classes][(i // classes) % max(len(by_class[i % classes]), 1)] for i in range(n)]
    return fixed_noise, images[torch.stack(picks)].clone()


def _cpu(obj):
    """Optimizer state to CPU tensors, recursively."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj
