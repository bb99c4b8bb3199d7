"""The training loop: one plain function that the UI's background process and the CLI both run.

    train(config, run_path)  ->  final state ("done" | "stopped" | "failed")

It writes everything to the run directory (see core/rundir.py) and reads stop / pause requests
from it between steps. Step functions return tensors; values are read every `log_every` steps
through step closures (XLA) or one sync (CUDA/CPU), never by `.item()` inside the step.

    python -m core.train --help
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
import traceback
from dataclasses import fields

from core.architecture import resolve_preset
from core.config import MAX_STEPS, ConfigError, TrainConfig, validate
from core.control import Control
from core.ema import WeightAverage
from core.report import Reporter
from core.rundir import FINAL_STATES, DiskRefused, RunDir, default_root, pid_alive, writable_problem
from core.step import GanStep

GRID_SIZE = 64        # the seed's 64 fixed noise vectors
DIVERGED_LOGS = 40    # consecutive log points with D winning outright before we warn

# Plain-language hints for failures a student will meet (the seed's troubleshooting list).
HINTS = (
    ("out of memory", "The batch is too large for the device's memory: halve the batch size "
                      "(on a Kaggle TPU v3-8, 32 per core is the safe choice)."),
    ("device index out of range", "A device string was hard-coded; Blink asks the runtime for its device, "
                                  "so this points at custom code: remove any 'xla:N' or 'cuda:N' literal."),
    ("not on the same device", "A tensor was created without device=...; create every tensor on the "
                               "runtime's device."),
    ("failed to compile", "XLA could not lower an operation (bilinear Upsample, complex torch.where, custom "
                          "autograd Functions). Use ConvTranspose2d or nearest-neighbour upsampling."),
    ("unsupported operation", "XLA could not lower an operation; replace it with ConvTranspose2d or "
                              "nearest-neighbour upsampling."),
    ("killed", "The process was killed from outside, most often for memory: try a smaller batch size."),
)


def hint_for(message: str) -> str:
    lower = message.lower()
    for needle, hint in HINTS:
        if needle in lower:
            return hint
    return ""


def warm_up() -> None:
    """Import what a run needs before one is asked for (a standby trainer calls this).

    torch.optim.Adam's first construction imports torch._dynamo, ~1.5 s on 2 cores: paid here,
    it no longer delays the first loss point after Start."""
    import torch._dynamo  # noqa: F401
    from core import data, devices, losses, models, quality  # noqa: F401


class Stop(Exception):
    """Raised inside the loop to end a run cleanly (checkpoint kept)."""
    def __init__(self, state: str, message: str):
        super().__init__(message)
        self.state, self.message = state, message


# Grids come often while the picture changes fastest, then at the configured interval.
EARLY_GRID_STEPS, EARLY_GRID_EVERY = 200, 10
EARLY_QUALITY_STEP = 50     # the first quality point, long before quality_every


# ------------------------------------------------------------------------------------------
def train(config: TrainConfig, run_path: str, resume: bool = False, watch_parent: int | None = None,
          device_info=None) -> str:
    """Train per config into run_path; return the final state. Never raises for training faults.

    One process drives every device (SPMD on several XLA devices), so every decision here is
    this process's own. watch_parent: the pid of the app that started this trainer; the run
    stops (checkpoint kept) when that process is gone.
    """
    from core import devices
    devices.prepare_environment(config.device)   # before anything imports torch_xla
    run = RunDir(run_path)
    try:
        info = device_info or devices.probe(config.device)
        config, preset_reason = resolved_for(config, info.kind)
        config = validate(config, device_caps=info.to_dict(), preset=config.preset)
    except (ConfigError, ValueError) as exc:
        run.write_status("failed", str(exc))
        return "failed"
    if resume:   # the config is resolved already: keep why its preset was picked ('auto', first session)
        previous = run.read_status()
        preset_reason = previous.preset_reason if previous.preset == config.preset else preset_reason
    # From here on, config.json is the config the run trains with: what resume, the Sample tab and
    # every reader of the run see is what the checkpoint and the generator hold.
    run.write_config(config)
    try:
        loop = Loop(config, run, info, resume, Control(run, (watch_parent,)), preset_reason=preset_reason)
        try:
            loop.run()
        except Stop as stop:
            loop.finish(stop.state, stop.message)
    except Stop as stop:   # raised while building the loop (a refused resume), or while finishing
        try:
            run.write_status(stop.state, stop.message)
        except OSError:
            pass
    except BaseException as exc:   # KeyboardInterrupt included: the status must say what happened
        _log_traceback(run, "trainer")
        try:
            run.write_status("failed", failure_message(run, f"Training failed: {_describe(exc).strip()[:300]}."))
        except OSError:
            pass
        if isinstance(exc, KeyboardInterrupt):
            raise
    return run.read_status().state or "failed"


def resolved_for(config: TrainConfig, device_kind: str) -> tuple[TrainConfig, str]:
    """The config a run trains with on this kind of device, and why it has its preset: the preset
    and precision 'auto' become here, and hyper-parameters left None set to their defaults for
    it (TrainConfig.resolved)."""
    from core.devices import default_precision
    preset, reason = resolve_preset(config.preset, device_kind)
    precision = default_precision(device_kind) if config.precision == "auto" else config.precision
    return dataclasses.replace(config.resolved(preset), preset=preset, precision=precision), reason


def failure_message(run: RunDir, message: str, saved_step: int | None = None) -> str:
    """The status message for a run that failed: what happened, what is kept, what to do.

    saved_step: the last checkpoint's step when the caller knows it (else the status says)."""
    saved = run.read_status().saved_step if saved_step is None else saved_step
    kept = (f" The last checkpoint (step {saved}) is kept: press Resume to continue from it."
            if saved and os.path.exists(run.file("checkpoint.pt")) else "")
    hint = hint_for(message)
    return f"{message}{kept}" + (f" Hint: {hint}" if hint else "")


def _describe(exc: BaseException) -> str:
    """An exception for the status: a write the disk refused in its plain words, else its type and text."""
    return str(exc) if isinstance(exc, DiskRefused) else f"{type(exc).__name__}: {str(exc)[:300]}"


def _log_traceback(run: RunDir, header: str) -> None:
    """Append the exception being handled to the run's error.log."""
    try:
        with open(run.file("error.log"), "a") as f:
            f.write(f"[{header}, pid {os.getpid()}]\n{traceback.format_exc()}")
    except OSError:   # a full or read-only disk must not hide the failure being reported
        pass


class Loop:
    """The run's training state; `run()` is the loop, `step()` one generator update.

    Two seams lead out of it: `report` (core/report.py) turns what happened into the run's
    status, and `control` (core/control.py, passed in) says at each log step whether to go on."""

    def __init__(self, config: TrainConfig, run: RunDir, info, resume: bool, control: Control | None = None,
                 preset_reason: str = ""):
        """config: resolved for this device (resolved_for), as train() passes it.
        control: what decides at each log step (default: the run's requests alone).
        preset_reason: why the run has its preset, for the status (default: as resolve_preset says)."""
        import torch
        from core import data, devices, losses, models

        self.config, self.run_dir = config, run
        self.rt = devices.Runtime(info)
        self.control = control or Control(run)
        self.rt.seed(config.seed)
        matmul_precision = self.rt.set_matmul_precision(config.precision)

        # ---- data: decoded, resized and cached once, in this one process --------------------
        t0 = time.perf_counter()
        dataset = data.load(config.dataset, config.data_path, max_mb=config.max_image_mb)
        resolution = models.model_resolution(config.preset, dataset.resolution)
        images = data.resize(dataset.images, resolution)
        validate(config, dataset_size=len(images))
        # Class-conditional when the dataset has labels (config.conditional "auto"): on MNIST the
        # unconditional fast model plateaus near 60% confident digits, the conditional one passes
        # 80% by step ~600 (bench/README.md, "Conditional"); and a viewer can ask for a digit.
        labels = dataset.labels if config.conditional == "auto" else None
        self.classes = int(labels.max()) + 1 if labels is not None and len(labels) else 0
        self.stream = data.BatchStream(images, config.batch_size, self.rt.device, config.seed,
                                       keep_on_device=info.kind == "cuda", labels=labels if self.classes else None,
                                       place=self.rt.to_device)
        self.report = Reporter(run, self.rt, config, trainer_pid=os.getpid(),
                               preset_reason=preset_reason or models.resolve_preset(config.preset, info.kind)[1],
                               classes=self.classes, matmul_precision=matmul_precision,
                               data_load_seconds=time.perf_counter() - t0, images_skipped=dataset.skipped)

        # ---- models and optimizers -------------------------------------------------------
        self.G, self.D = models.build(config.gan, config.preset, dataset.channels, resolution, config.z_dim,
                                      self.classes)
        self.G.to(self.rt.device)
        self.D.to(self.rt.device)
        if info.kind in ("cuda", "cpu"):
            # NHWC convolutions: tensor cores prefer them, and on CPU oneDNN runs this model's
            # steps 10-20% faster in them (bench/README.md).
            self.G.to(memory_format=torch.channels_last)
            self.D.to(memory_format=torch.channels_last)
        betas = (config.beta1, config.beta2)
        # One fused kernel for all of a net's parameters (CPU and CUDA; XLA fuses on its own).
        fused = {"fused": True} if info.kind in ("cpu", "cuda") else {}
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=config.lr_g, betas=betas, **fused)
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=config.lr_d, betas=betas, **fused)
        self.train_step = GanStep(self.G, self.D, self.opt_g, self.opt_d, losses.make_loss(config.gan, config.gp_weight),
                                  self.rt, config.n_critic, config.z_dim, config.precision)

        # Fixed noise drawn on the CPU from the run's seed: the same grid latents on any device.
        cpu_noise = torch.Generator().manual_seed(config.seed)
        # A conditional G's grid has one column per class (0-9 for digits), so its rows are
        # GRID_SIZE rounded down to whole rows: 6 rows of 10 for MNIST.
        self.grid_columns = models.grid_columns(self.classes)
        grid_count = GRID_SIZE // self.grid_columns * self.grid_columns
        self.fixed_noise = torch.randn(GRID_SIZE, config.z_dim, 1, 1, generator=cpu_noise)[:grid_count]
        # What every viewer sees (grids, the quality meter, the generator file) comes from
        # G_sampled: the moving average of G's weights when config.ema > 0 (core/ema.py), else G.
        self.ema = WeightAverage(self.G, config.ema) if config.ema else None
        self.G_sampled = self.ema.module if self.ema else self.G
        self.step_count = 0
        self.saved_step = 0
        if resume:
            self._load_checkpoint()
        self.fixed_noise_device = self.fixed_noise.to(self.rt.device)

        # ---- bookkeeping read at log time -------------------------------------------------
        self.last_values: dict = {}
        self.values_finite = True
        self.d_wins_streak = 0
        self.warning = ""
        self.quality, self._make_quality = None, None
        if config.quality_every:
            from core import quality
            # Built at the first measurement, not here: its real-image features take ~0.4 s,
            # which would delay the first loss point on the page.
            self._make_quality = lambda: quality.for_dataset(config.dataset, dataset, resolution)

    # ---- checkpoints ---------------------------------------------------------------------
    def _load_checkpoint(self) -> None:
        state = self.run_dir.load_checkpoint()
        if "conditional" not in state["config"]:
            # Saved before class-conditional training existed: unconditional, with the old
            # defaults (batch 64, lr 1e-3, z 100), which no longer resolve from this config.
            raise Stop("failed", "Cannot resume: this run was saved by an older Blink (before class-conditional "
                                 "training and the new defaults). Start a new run; its last generator is kept "
                                 "for sampling.")
        # Resolved as this run's config was: a checkpoint from before config.json was resolved
        # holds the preset 'auto', which is what became this config's preset.
        saved, _ = resolved_for(TrainConfig.from_dict(state["config"]), self.rt.kind)
        changed = self.config.differences(saved)
        if changed:
            raise Stop("failed", config_changed_message(changed))
        self.G.load_state_dict(state["G"])
        self.D.load_state_dict(state["D"])
        self.opt_g.load_state_dict(state["opt_g"])
        self.opt_d.load_state_dict(state["opt_d"])
        if self.ema:   # a checkpoint saved before EMA sampling starts the average from its G
            self.ema.load(state.get("G_ema", state["G"]), state["step"])
        for scaler, key in ((self.train_step.scaler_g, "scaler_g"), (self.train_step.scaler_d, "scaler_d")):
            if scaler is not None and state.get(key):
                scaler.load_state_dict(state[key])
        self.fixed_noise = state["fixed_noise"]
        self.step_count = self.saved_step = state["step"]
        self.report.elapsed_before = state.get("elapsed", 0.0)

    def save_checkpoint(self) -> None:
        """Save only weights that produced finite losses: a diverged run keeps its last good one."""
        if not self.values_finite or self.step_count == self.saved_step:
            return
        self._work("saving the checkpoint", self._write_checkpoint)
        self.saved_step = self.step_count

    def _write_checkpoint(self) -> None:
        """Replicated weights (SPMD included) come to the host whole: one copy is the whole model."""
        rt, scaler_g, scaler_d = self.rt, self.train_step.scaler_g, self.train_step.scaler_d
        g_state = rt.cpu_state_dict(self.G)
        sampled_state = rt.cpu_state_dict(self.G_sampled) if self.ema else g_state
        self.run_dir.save_checkpoint({
            "version": 1, "config": self.config.to_dict(), "step": self.step_count,
            "elapsed": self.report.elapsed(),
            "G": g_state, "D": rt.cpu_state_dict(self.D),
            "opt_g": _cpu(self.opt_g.state_dict()), "opt_d": _cpu(self.opt_d.state_dict()),
            "scaler_g": scaler_g.state_dict() if scaler_g else None,
            "scaler_d": scaler_d.state_dict() if scaler_d else None,
            "fixed_noise": self.fixed_noise,
            **({"G_ema": sampled_state} if self.ema else {}),
        })
        meta = {"spec": self.G.spec.to_dict(), "config": self.config.to_dict(), "step": self.step_count,
                "preset": self.config.preset, "format": "blink-generator-v1"}
        self.run_dir.save_generator(sampled_state, meta)

    def step(self) -> dict:
        """One generator update (core/step.py GanStep), then the average of G's weights, in the
        same graph on XLA; tensors only."""
        self.set_learning_rates(lr_factor(self.step_count, self.config.steps, self.config.lr_decay_start))
        tensors = self.train_step(self.stream)
        if self.ema:
            self.ema.update()
        return tensors

    def set_learning_rates(self, factor: float) -> None:
        """Both optimizers at factor x the config's rates, every step (so a loaded optimizer state's
        rates never linger). A Python float in param_groups: on XLA a changing value becomes device
        data, not a new graph (notes/torch_xla.md), unless it is 0 (a constant there), which
        lr_factor never returns."""
        for optimizer, lr in ((self.opt_g, self.config.lr_g), (self.opt_d, self.config.lr_d)):
            for group in optimizer.param_groups:
                group["lr"] = lr * factor

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        cfg, rt = self.config, self.rt
        self.report.start()
        self._status("compiling" if rt.is_xla else "running",
                     "XLA is compiling the graph..." if rt.is_xla else "Training...")
        while self.step_count < cfg.steps:
            tensors = self.step()
            self.step_count += 1
            step = self.step_count
            # A request seen between log steps makes this step a log step: the curve gets the
            # stopped step's point, and the request is acted on after it.
            log_now = step == 1 or step % cfg.log_every == 0 or step == cfg.steps or self.control.request_waiting()
            if log_now:
                rt.read_later(self._on_values, {"step": _as_tensor(step, tensors), **tensors})
            rt.mark_step()
            self.report.stepped(step)
            if self.report.batch_shards is None:   # once: how the first batch was split over the devices
                self.report.batch_shards = rt.batch_shards(self.stream.last_batch)
            if grid_due(step, cfg):
                self.save_grid()
            if log_now:
                self._after_log()
            if step % cfg.checkpoint_every == 0:
                self.save_checkpoint()
            if self._make_quality and (step % cfg.quality_every == 0 or step == cfg.steps
                                       or step == min(EARLY_QUALITY_STEP, cfg.quality_every)):
                self._work("measuring quality", self._measure_quality)
        self.finish("done", f"Finished {self.step_count} steps.")

    def _on_values(self, values: dict) -> None:
        """Runs once the logged step's values exist (a step closure on XLA)."""
        step = int(values.pop("step"))
        self.values_finite = all(math.isfinite(v) for v in values.values())
        self.last_values = values
        if self.config.gan == "dcgan":
            self.d_wins_streak = self.d_wins_streak + 1 if d_has_won(values) else 0
        event = {"step": step, "time": round(self.report.elapsed(), 3), **_rounded(values)}
        if self.rt.is_xla:   # the graph counters, read after this step's graph ran
            event.update(xla_compiles=self.rt.compile_count(), xla_executions=self.rt.execution_count())
        self._work("writing the loss log", lambda: self.run_dir.append_event(event))

    def _after_log(self) -> None:
        diverged = divergence_message(self.last_values, self.step_count, self.saved_step, self.config.precision)
        if diverged:
            raise Stop("failed", diverged)
        if self.d_wins_streak == DIVERGED_LOGS:
            self.warning = D_WINS_WARNING
        decision = self.control.decision()
        if decision == "pause":
            self._status("paused", f"Paused at step {self.step_count}.")
            paused_at = time.perf_counter()
            decision = self.control.wait_while_paused()
            self.report.paused(time.perf_counter() - paused_at)
        self._stop_for(decision)
        self._status("running", "Training...")

    def _stop_for(self, decision: str) -> None:
        if decision == "gone":
            raise Stop("stopped", "Stopped: the app that started this run has closed. Resume it from the UI or CLI.")
        if decision == "stop":
            raise Stop("stopped", f"Stopped by request at step {self.step_count}.")

    def _work(self, what: str, work) -> None:
        """Run the loop's bookkeeping (files, grids, quality): a failure ends the run as `failed`
        with what it was doing, the last good checkpoint kept."""
        try:
            work()
        except Exception as exc:
            _log_traceback(self.run_dir, what)
            message = f"Training failed while {what} at step {self.step_count}: {_describe(exc)}."
            raise Stop("failed", failure_message(self.run_dir, message, saved_step=self.saved_step)) from exc

    def _status(self, state: str, message: str) -> None:
        self._work("writing the status", lambda: self.report.write(
            state, message, self.step_count, self.saved_step, self.warning, self.train_step.data_seconds))

    def save_grid(self) -> None:
        import torch
        self.G_sampled.eval()
        with torch.no_grad(), self.rt.autocast(self.config.precision):
            images = self.G_sampled(self.fixed_noise_device)
        self.G_sampled.train()
        self._work("saving the sample grid", lambda: self.run_dir.save_grid(
            images.float().cpu().numpy(), self.step_count, self.grid_columns))

    def _measure_quality(self) -> None:
        if self.quality is None:
            self.quality = self._make_quality()
        values = self.quality.measure(self.G_sampled, self.rt.device)
        self.run_dir.append_event({"step": self.step_count, "time": round(self.report.elapsed(), 3),
                                   **{f"quality_{k}": v for k, v in _rounded(values).items()}})

    def finish(self, state: str, message: str) -> None:
        if state != "failed":   # a failed run keeps its last good checkpoint, not the weights it failed with
            self.save_checkpoint()
            if not grid_due(self.step_count, self.config):   # the grid shows where the run ended
                self.save_grid()
        self._status(state, message)
        self.run_dir.clear_request()


# ---- the learning rates' schedule (pure: unit-tested without a Loop) -----------------------
def lr_factor(step: int, steps: int, decay_start: float) -> float:
    """The learning rates' share of the config's for the update after `step` updates of a
    `steps`-long run: 1 until decay_start x steps, then falling linearly to 1 / (the decay's
    length) for the last update, never 0 (CycleGAN's schedule at decay_start 0.5)."""
    start = int(decay_start * steps)
    if step < start:
        return 1.0
    return (steps - step) / (steps - start)


# ---- rules on the logged values (pure: unit-tested without a Loop) -----------------------
D_WINS_WARNING = ("The discriminator has won outright for a long stretch (D(x)~1, D(G(z))~0): the generator "
                  "gets no useful gradient. Consider restarting with WGAN-GP or hinge loss.")


def d_has_won(values: dict) -> bool:
    """A non-saturating D that calls the real images real and the fakes fake, outright (D(x), D(G(z))
    are probabilities only for that loss: the caller asks for dcgan runs only)."""
    return "d_real" in values and values["d_real"] > 0.99 and values["d_fake"] < 0.01


def divergence_message(values: dict, step: int, saved_step: int, precision: str) -> str | None:
    """What a student reads when a logged value is NaN or infinite (None while all are finite):
    which values, what is kept, what to change."""
    bad = ", ".join(k for k, v in values.items() if not math.isfinite(v))
    if not bad:
        return None
    kept = (f"The last good checkpoint (step {saved_step}) is kept." if saved_step
            else "No checkpoint had been saved yet.")
    advice = "fp16 overflowed: train in fp32 or bf16. " if precision == "fp16" else ""
    return (f"Training diverged at step {step}: {bad} became NaN or infinite. {kept} "
            f"{advice}Try a lower learning rate, or WGAN-GP, which is more stable.")


def grid_due(step: int, cfg: TrainConfig) -> bool:
    """Grids at step 1, every EARLY_GRID_EVERY steps at first, then every grid_every, and at the end."""
    early = step <= EARLY_GRID_STEPS and step % min(EARLY_GRID_EVERY, cfg.grid_every) == 0
    return step == 1 or early or step % cfg.grid_every == 0 or step == cfg.steps


def _as_tensor(step: int, like: dict):
    import torch
    any_tensor = next(iter(like.values()))
    return torch.tensor(float(step), device=any_tensor.device)


def _rounded(values: dict) -> dict:
    return {k: (round(v, 5) if isinstance(v, float) and math.isfinite(v) else v) for k, v in values.items()}


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


# ------------------------------------------------------------------------------------------
# Resume: the one policy, for the CLI and the page (app/job.py)
# ------------------------------------------------------------------------------------------
class ResumeRefused(ValueError):
    """A run cannot be resumed as asked; the message says why and what to do instead."""


def config_changed_message(changed: list[str]) -> str:
    return ("Cannot resume: the config changed in " + ", ".join(changed) + ". Resume with the run's own config "
            "(only steps may change), or start a new run.")


def prepare_resume(run: RunDir, steps: int | None = None, given: dict | None = None) -> TrainConfig:
    """Check that `run` can continue from its checkpoint, make it ready, and return the config to
    train it with (its config.json with the new total of steps). Raises ResumeRefused.

    steps: the new total, more than the run has done; None keeps the run's own. given: the config
    values the caller asked for (the CLI's flags, the page's form). The checkpoint's weights and
    optimizer state belong to the run's own config, so any difference but steps is refused; both
    are resolved as the trainer resolved the run, so 'auto' or a default left None matches what it
    became there. Making ready: events logged after the checkpoint go (RunDir.trim_events), and so
    does a request left from the last session."""
    try:
        saved = run.read_config()
    except (OSError, ValueError):
        raise ResumeRefused(f"{run.name} is not a run folder (it has no config.json): name a run to resume.")
    if not os.path.exists(run.file("checkpoint.pt")):
        raise ResumeRefused(f"Run {run.name} has no checkpoint yet, so it cannot be resumed: start a new run.")
    status = run.read_status()
    if status.state not in FINAL_STATES and pid_alive(status.pid):
        raise ResumeRefused(f"Run {run.name} is still training: stop it first.")
    # A run saved before config.json was resolved holds 'auto' and None: resolved here as its trainer did.
    own, _ = resolved_for(saved, status.device_kind)
    wanted, _ = resolved_for(dataclasses.replace(saved, **(given or {})), status.device_kind)
    changed = wanted.differences(own)
    if changed:
        raise ResumeRefused(config_changed_message(changed))
    done = status.saved_step
    total = own.steps if steps is None else int(steps)
    if total <= done:
        raise ResumeRefused(f"Run {run.name} already has {done} steps: ask for more than that "
                            f"(e.g. {done + own.steps}) to continue it.")
    if total > MAX_STEPS:
        raise ResumeRefused(f"At most {MAX_STEPS:,} steps.")
    run.trim_events(done)
    run.clear_request()
    return dataclasses.replace(own, steps=total)


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core.train",
        description="Train a GAN headless into a run directory (the same trainer the app runs).")
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        default = getattr(defaults, f.name)
        # From the annotation ("int | None" is an int flag), not the default: a None default says nothing.
        kind = {"int": int, "float": float, "str": str}[str(f.type).split(" ")[0]]
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=kind, default=default,
                            help=_flag_help(f.metadata, default))
    parser.add_argument("--run-dir", help="run directory to create (default: runs/<time>-<gan>-<dataset>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped or finished run")
    return parser


def _flag_help(spec: dict, default) -> str:
    """A flag's help from its TrainConfig field: what it is, its choices or range, its default.
    The choices are listed, not enforced by argparse: validate() refuses a wrong one with the
    message the page shows too."""
    text = spec["help"]
    if spec["choices"]:
        text += "; one of: " + ", ".join(spec["choices"])
    elif spec["range"]:
        low, high = spec["range"]
        text += f"; {low:,} to {high:,}" if high is not None else f"; at least {low:,}"
    if default not in (None, ""):
        text += f" (default: {default})"
    return text.replace("%", "%%")   # argparse formats help with %


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = vars(_parser().parse_args(argv))
    run_dir, resume = args.pop("run_dir"), args.pop("resume")
    problem = writable_problem(os.path.dirname(os.path.abspath(resume or run_dir)) if resume or run_dir
                               else default_root())
    if problem:   # before anything is written: a read-only disk would otherwise end in a traceback
        print(f"error: {problem}.", file=sys.stderr)
        return 2
    if resume:
        run = RunDir(resume)
        # Flags given explicitly must match the run's config; only --steps may change.
        given = {a[2:].split("=")[0].replace("-", "_") for a in argv if a.startswith("--")}
        try:
            config = prepare_resume(run, args["steps"] if "steps" in given else None,
                                    {name: args[name] for name in given if name in args})
        except ResumeRefused as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        config = TrainConfig(**args)
        try:
            validate(config)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if run_dir:
            os.makedirs(os.path.join(run_dir, "grids"), exist_ok=True)
            run = RunDir(run_dir)
            run.write_config(config)
        else:
            run = RunDir.create(config)
    print(f"run directory: {run.path}", flush=True)
    _stop_cleanly_on_signals(run)
    state = train(config, run.path, resume=bool(resume))
    print(f"{state}: {run.read_status().message}")
    return 0 if state in ("done", "stopped") else 1


def _stop_cleanly_on_signals(run: RunDir) -> None:
    """Ctrl-C and SIGTERM stop the CLI's run as Stop on the page does: within a second, with
    a checkpoint and a generator saved, resumable. A second Ctrl-C quits at once."""
    import signal

    def ask_to_stop(signum, frame):
        if run.read_request() == "stop" and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run.request("stop")
        print("\nStopping (a checkpoint is kept); Ctrl-C again quits at once.",
              file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, ask_to_stop)
    signal.signal(signal.SIGTERM, ask_to_stop)


if __name__ == "__main__":
    sys.exit(main())
