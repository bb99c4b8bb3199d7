"""What a run's status says about its progress: speed, ETA, memory and diagnostics.

The training loop says what happened and the Reporter works out the rest and writes it as the
run's Status (core/status.py) through RunDir.write_status, as stylegan2-ada's training loop hands
its progress to a `progress_fn`:

    report = Reporter(run, training, trainer_pid=os.getpid())   # training: core.training's Training
    report.start()                         # the loop begins: training time counts from here
    report.stepped(step)                   # after each step's mark_step
    report.paused(seconds)                 # paused time is not training time
    report.write(state, message, step, saved_step, warning, data_seconds)
    report.elapsed()                       # training seconds, earlier sessions included

On XLA the first steps compile: the state reads "compiling" until the steps are steady, and the
seconds spent compiling are left out of the speed and the ETA.
"""
from __future__ import annotations

import time
from typing import NamedTuple

# Device memory is read at the log steps near every this many steps: on XLA the query has a cost.
MEMORY_EVERY_STEPS = 100
# A warning once device memory is this full: a job over the limit can be killed without a word.
MEMORY_WARNING_SHARE = 0.9


class Steady(NamedTuple):
    """The base for speed and ETA, taken once compilation is over."""
    time: float               # time.perf_counter() then
    step: int
    compile_seconds: float    # the runtime's compile seconds then


def steps_per_second(steady: Steady | None, step: int, now: float, compile_seconds: float) -> float | None:
    """The speed since the steady base; None before there is one, or no step since it.

    Compilations after the first steps (the grid's and the quality meter's graphs) are one-off
    costs: left out, they would make the speed low and the ETA long."""
    if steady is None or step <= steady.step:
        return None
    busy = now - steady.time - (compile_seconds - steady.compile_seconds)
    return (step - steady.step) / max(busy, 1e-9)


def seconds_left(steps: int, step: int, speed: float | None) -> float | None:
    return (steps - step) / speed if speed else None


def memory_due(step: int, log_every: int) -> bool:
    """Read device memory at this log step? At the first step and the log step that reaches each
    MEMORY_EVERY_STEPS."""
    return step % MEMORY_EVERY_STEPS < log_every or step <= 1


class Reporter:
    """The run's progress, as the trainer sees it; `write` makes it the run's status."""

    def __init__(self, run, training, *, trainer_pid: int, chunk: int = 0):
        """run: the RunDir; training: what trains (its plan, runtime and the setup's measures, which
        every status repeats); chunk > 0: the run trains in chunks and this session is that one."""
        self.run, self.training, self.rt, self.config = run, training, training.rt, training.config
        self.plan = training.plan
        self.trainer_pid, self.chunk = trainer_pid, chunk
        # Each device's piece of a batch, read from the batch's sharding once it exists (the loop sets it).
        self.batch_shards: list[list[int]] | None = None
        self.elapsed_before = 0.0   # training seconds of earlier sessions: a resumed run's checkpoint says
        from core.quality import meter_note
        # What the page says beside the run: the device's notice, and a meter not the dataset's own.
        measured = self.config.quality_every > 0
        self.notice = " ".join(note for note in (self.rt.info.notice, measured and meter_note(self.config.dataset))
                               if note)
        self.start()

    def start(self) -> None:
        self.t_start = time.perf_counter()
        self.first_step_seconds: float | None = None
        self.steady: Steady | None = None

    def stepped(self, step: int) -> None:
        """After a step's mark_step. Step 1 and step 2 are different graphs (the optimizers create
        their state in step 1), so on XLA the steps are steady from step 3, elsewhere from step 2."""
        now = time.perf_counter()
        if step == 1:
            self.first_step_seconds = now - self.t_start
        if self.steady is None and step >= 2 and (not self.rt.is_xla or step >= 3):
            self.steady = Steady(now, step, self.rt.compile_seconds())

    def paused(self, seconds: float) -> None:
        """The loop waited this long, paused: neither training time nor part of the speed."""
        self.t_start += seconds
        if self.steady is not None:
            self.steady = self.steady._replace(time=self.steady.time + seconds)

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t_start

    def write(self, state: str, message: str, step: int, saved_step: int, warning: str,
              data_seconds: float, stepped_from: int = 0, phase: str = "", augment_p: float | None = None) -> None:
        """The run's status at `step`. warning: the loop's own (core/phase.py: D has won, mode
        collapse); a nearly full device memory replaces it. data_seconds: time the steps waited for
        batches so far. phase: core.phase.Phase.line(), what is happening in words. augment_p: the
        share of D's images augmented at the last log step (core/augment.py), None when none are."""
        cfg, rt = self.config, self.rt
        if state == "running" and rt.is_xla and self.steady is None:
            # XLA compiles until the steps are steady (see stepped): say so rather than show a stalled run.
            state, message = "compiling", "XLA is compiling the graph (the first steps; later steps reuse it)..."
        now = time.perf_counter()
        session_seconds = now - self.t_start
        speed = steps_per_second(self.steady, step, now, rt.compile_seconds())
        remaining = seconds_left(cfg.steps, step, speed)
        images_per_step = cfg.batch_size * cfg.n_critic   # the batch is global: split over the devices
        per_device = rt.memory_per_device() if memory_due(step, cfg.log_every) else None
        memory = rt.fullest(per_device)   # the warning is for the device that runs out first
        diagnostics = {
            "compiles": rt.compile_count(), "fallback_ops": rt.fallback_ops(),
            "graph_executions": rt.execution_count(), "batch_shards": self.batch_shards,
            "compile_seconds": round(rt.compile_seconds(), 2) if rt.is_xla else None,
            "compile_cache": rt.compile_cache(),
            "matmul_precision": self.training.matmul_precision,
            "data_wait_share": round(data_seconds / session_seconds, 4) if session_seconds > 0 else None,
            "data_load_seconds": round(self.training.data_load_seconds, 2),
            "unreadable_images_skipped": self.training.dataset.skipped,
            "first_step_seconds": round(self.first_step_seconds, 2) if self.first_step_seconds else None,
            "augment_p": round(augment_p, 3) if augment_p is not None else None,
            "cpu_threads": rt.cpu_threads(),
        }
        if memory:
            diagnostics["memory_used"], diagnostics["memory_total"] = memory
            if len(per_device) > 1:
                diagnostics["memory_per_device"] = [list(stats) for stats in per_device]
            if memory[0] > MEMORY_WARNING_SHARE * memory[1]:
                warning = (f"Device memory is {memory[0] / memory[1]:.0%} full: a job over the limit can be killed "
                           "with no clear message. Lower the batch size.")
        self.run.write_status(
            state, message, step=step, steps=cfg.steps, pid=self.trainer_pid,
            device=rt.info.name, device_kind=rt.kind, devices=rt.device_count, processes=rt.info.processes,
            layout=rt.info.batch_layout(cfg.batch_size), batch_size=cfg.batch_size, batch_reason=self.plan.batch_reason,
            precision=cfg.precision, gan=cfg.gan,
            preset=cfg.preset, preset_reason=self.plan.preset_reason, classes=self.plan.classes,
            class_names=list(self.plan.class_names), resolution=self.plan.resolution, augment=self.plan.augment_reason,
            steps_per_second=round(speed, 3) if speed else None,
            images_per_second=round(speed * images_per_step, 1) if speed else None,
            seconds_left=round(remaining, 1) if remaining is not None else None,
            elapsed=round(self.elapsed(), 2), warning=warning, diagnostics=diagnostics,
            saved_step=saved_step, notice=self.notice, chunk=self.chunk, stepped_from=stepped_from,
            phase=phase)
