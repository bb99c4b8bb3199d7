"""The training loop: one plain function that the UI's background process and the CLI both run.

    train(config, run_path)  ->  final state ("done" | "stopped" | "failed")

It writes everything to the run directory (see core/rundir.py) and reads stop / pause requests
from it between steps. What trains is core/training.py's (one setup, one step); around it the
Loop adds the run's files, its status (a core.report.Reporter) and its decisions (a
core.control.Control), both passed in. Step functions return tensors; values are read every
`log_every` steps through step closures (XLA) or one sync (CUDA/CPU), never by `.item()` inside
the step.

    python -m core.train --help
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, fields

from core.config import ConfigError, TrainConfig
from core.control import Control, paused_message, stepped_words, stopped_message
from core.failures import describe, divergence_message, failure_message, log_traceback
from core.heartbeat import Heartbeat
from core.phase import Phase
from core.report import Reporter
from core.plan import Plan, plan_run
from core.resume import ResumeRefused, checkpoint_problem, prepare_resume
from core.rundir import RunDir, default_root, writable_problem

MAX_STEPS_WHILE_PAUSED = 100   # one Step press at most: a class watches each one

# Grids come often while the picture changes fastest, then at the configured interval.
EARLY_GRID_STEPS, EARLY_GRID_EVERY = 200, 10
EARLY_QUALITY_STEP = 50     # the first quality point, long before quality_every
PREPARE_STATUS_SECONDS = 0.5   # between prepare_data's status writes


@dataclass(frozen=True)
class Chunk:
    """One piece of a run that trains in chunks (app/chunks.py: one ZeroGPU call each): the
    trainer trains for `seconds` from its first step, then saves the checkpoint and ends, and the app
    starts the next chunk from it."""
    number: int
    seconds: float


class SessionEnds(Exception):
    """Raised inside the loop to end this trainer session cleanly (checkpoint kept), carrying the
    state and message the run is left with: "done", "stopped" or "failed" when the run ends, or
    "running" (a chunk's time is up) and "paused" (a chunk heard Pause) when the next session
    goes on with it."""
    def __init__(self, state: str, message: str):
        super().__init__(message)
        self.state, self.message = state, message


# ------------------------------------------------------------------------------------------
def train(plan: Plan, run_path: str, resume: bool = False, watch_parent: int | None = None,
          device_info=None, chunk: Chunk | None = None, ranks=None) -> str:
    """Train `plan` (the run's, as config.json holds it) into run_path; return the final state.
    Never raises for training faults.

    The plan was made where the run was asked for; here it is only checked against the device and
    the data this process finds ("the images changed since Start"). One process drives every device
    (SPMD on several XLA devices), unless torchrun started several (ranks: this one's
    core.distributed.Ranks): then each trains its rows of every batch, rank 0 alone reads the
    requests and writes run_path, and its decisions are every rank's (core.distributed.SharedControl).
    watch_parent: the pid of the app that started this trainer; the run stops (checkpoint kept) when
    that process is gone. device_info: the device as the caller probed it (the CLI). chunk: train
    only that long, then save and return "running" (or "paused" when a Pause came: a chunk does not
    wait, holding the GPU).
    """
    run = RunDir(run_path)
    leads = ranks is None or ranks.leads
    beat = Heartbeat(run)
    if leads:
        beat.start()   # from here on the app can tell a busy trainer from a stuck one
    ended = "failed"   # what a rank other than 0 returns: it reads no status
    try:
        loop = _set_up(plan, run, beat, device_info, resume, watch_parent, chunk, ranks)
        try:
            loop.run()
        except SessionEnds as end:
            loop.finish(end.state, end.message)
        ended = loop.ended
    except SessionEnds as end:   # raised while building the loop (a refused resume), or while finishing
        ended = end.state
        if leads:
            _write_end(run, end.state, end.message)
    except BaseException as exc:   # KeyboardInterrupt included: the status must say what happened
        if leads:
            log_traceback(run, "trainer")
            why = describe(exc).strip()[:300]
            if ranks and ranks.lost_another(exc):
                why = (f"another of this run's {ranks.world} processes ended or stopped answering, so this one could "
                       f"not go on ({why})")
            _write_end(run, "failed", failure_message(run, f"Training failed: {why}."))
        else:   # torchrun shows a rank's own stderr: the run's files are rank 0's
            traceback.print_exc()
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        beat.stop()
    return (run.read_status().state or "failed") if leads else ended


def _set_up(plan: Plan, run: RunDir, beat: Heartbeat, info, resume: bool, watch_parent: int | None,
            chunk: Chunk | None, ranks) -> "Loop":
    """The run's Loop on the device `info` (None: probed here), its data loaded and checked against the plan."""
    from core import devices, runtime
    from core.training import build_training, load_data
    info = info or probe_device(plan.config.device, ranks)
    # One host decides Stop and Pause: a slice of several is refused before its runtime starts.
    refusal = devices.multi_host_refusal(devices.slice_hosts()) if devices.is_tpu(info.kind) else None
    if refusal:
        raise SessionEnds("failed", refusal)
    beat.doing("loading data")
    try:
        dataset = load_data(plan, device=info)
    except ConfigError as exc:
        raise SessionEnds("failed", str(exc))
    training = build_training(plan, dataset, runtime.Runtime(info, ranks))
    report = Reporter(run, training, trainer_pid=os.getpid(), chunk=chunk.number if chunk else 0)
    control = Control(run, (watch_parent,))
    if ranks:
        from core.distributed import SharedControl
        control = SharedControl(ranks, control if ranks.leads else None)
    return Loop(training, run, control, report, resume=resume, chunk_seconds=chunk.seconds if chunk else None,
                beat=beat)


def _write_end(run: RunDir, state: str, message: str) -> None:
    try:
        run.write_status(state, message)
    except OSError:   # a full or read-only disk: the trainer still ends
        pass


def probe_device(requested: str, ranks=None):
    """The device this process trains on (as torchrun's ranks share it), or SessionEnds("failed")
    saying why it cannot."""
    from core import devices
    devices.prepare_environment(requested)   # before anything imports torch_xla
    try:
        info = devices.probe(requested)
        return ranks.describe(info) if ranks else info
    except ValueError as exc:
        raise SessionEnds("failed", str(exc))


def say_compiles(beat: Heartbeat, run: RunDir, rt) -> None:
    """A compile after the first steps (a new graph: the grid's, the quality meter's, a changed
    step) stalls the run, on a TPU for up to minutes: the status says so while it lasts, and the
    trainer's next status puts its state back. The heartbeat's thread sees the compile begin (`rt`
    says so) and writes it, while the trainer's own thread waits for the compile."""
    def say() -> None:
        with beat.status_lock:
            if run.read_status().state == "running":   # the first steps' compiles say so already
                run.write_status("compiling", f"XLA is compiling a new graph after step {beat.step} (later steps reuse it)...")
    beat.compiling, beat.on_compiling = rt.compiling, say


def prepare_data(run_path: str) -> bool:
    """Decode, resize and cache the run's data on the CPU as its plan trains it, writing the
    progress into the run's status ("preparing"); False (status "failed", in the dataset's own
    words) when the data is refused or changed since Start. No device work: a chunked run does this
    before its first GPU call (app/chain.py), so a call's seconds are training seconds, and the
    trainer then reads the cached files."""
    from core import data
    from core.training import load_data
    run = RunDir(run_path)
    last_write = 0.0

    def progress(done: int, total: int) -> None:
        nonlocal last_write
        # Each write replaces status.json: a couple a second keep the page live, more would only cost.
        if time.monotonic() - last_write >= PREPARE_STATUS_SECONDS or done == total:
            last_write = time.monotonic()
            run.write_status("preparing", f"Preparing the dataset: {done:,} of {total:,} images...", pid=os.getpid())

    try:
        plan = run.read_plan()
        dataset = load_data(plan, progress)
        data.resized(dataset, plan.resolution, progress)
    except (ConfigError, data.DatasetError) as exc:
        run.write_status("failed", str(exc), pid=None)
        return False
    progress(len(dataset), len(dataset))   # a set read from the cache says so too
    return True


class Loop:
    """A run's loop around its Training: `run()` steps it and does the bookkeeping.

    Two seams lead out of it, both passed in: `report` (core/report.py) turns what happened into
    the run's status, and `control` (core/control.py) says at each log step whether to go on."""

    def __init__(self, training, run: RunDir, control: Control, report: Reporter, resume: bool = False,
                 chunk_seconds: float | None = None, beat: Heartbeat | None = None):
        """training: core.training.build_training's, for a config resolved for its device.
        chunk_seconds: how long this chunk of the run trains, counted from its first step, so the
        data and the nets' setup take none of it (None: not chunked)."""
        self.training, self.rt, self.run_dir = training, training.rt, run
        self.control, self.report = control, report
        self.chunk_seconds = chunk_seconds
        self.chunk_deadline: float | None = None
        self.beat = beat or Heartbeat(run)   # not started: a bench or a test steps without one
        say_compiles(self.beat, run, self.rt)
        self.saved_step = 0
        self.ended: str | None = None   # the state finish() left the run in
        leads = self.rt.leads
        if resume:
            # Rank 0 reads the checkpoint and hands it to the other processes (share: itself when alone).
            state = run.load_checkpoint() if leads else None
            problem = self.rt.share(checkpoint_problem(state, training) if leads else None)
            if problem:
                raise SessionEnds("failed", problem)
            state = self.rt.share(state)
            training.load_checkpoint_state(state)
            self.saved_step = training.step_count
            report.elapsed_before = state.get("elapsed", 0.0)
            # The settings the checkpoint was trained with; the host's later changes at their own steps.
            training.plan = training.plan.at_step(training.step_count)
            training.follow_plan()
        self.later_changes = [c for c in training.plan.changes if c["step"] > training.step_count]
        self.last_values: dict = {}
        self.values_finite = True
        # The phase line and the warnings (D has won, mode collapse): core/phase.py's rules over the
        # run's values; a resumed run (or the next chunk) starts from the events it logged.
        self.phase = Phase(training.plan.gan, conditional=training.classes > 0,
                           events=run.read_events()[0] if resume and leads else (),
                           measured=self.config.quality_every > 0)
        self.warning = ""
        # The quality meter is built at its first measurement, not here: its real-image features
        # would delay the first loss point on the page.
        self.quality = None

    @property
    def config(self):
        """The run's config as it trains now: the host may change some of it (apply_settings)."""
        return self.training.config

    @property
    def step_count(self) -> int:
        return self.training.step_count

    # ---- checkpoints ---------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        """Save only weights that produced finite losses: a diverged run keeps its last good one."""
        if not self.values_finite or self.step_count == self.saved_step:
            return
        self._work("saving the checkpoint", self._write_checkpoint)
        self.saved_step = self.step_count

    def _write_checkpoint(self) -> None:
        training = self.training
        state = {**training.checkpoint_state(), "elapsed": self.report.elapsed()}
        self.run_dir.save_checkpoint(state)
        meta = {"spec": training.G.spec.to_dict(), "config": self.config.to_dict(), "step": self.step_count,
                "preset": self.config.preset, "format": "blink-generator-v1",
                "class_names": training.class_names}
        self.run_dir.save_generator(state.get("G_ema", state["G"]), meta)

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        cfg, rt, training = self.config, self.rt, self.training
        from core.images import to_model_range
        self._work("saving the real images", lambda: self.run_dir.save_real_grid(
            to_model_range(training.real_grid).numpy(), training.grid_columns))
        self.share_cpu()   # a run started beside another takes its share from its first step
        self.report.start()
        self.beat.doing("training")
        if self.chunk_seconds is not None:
            self.chunk_deadline = time.monotonic() + self.chunk_seconds
        self._status("compiling" if rt.is_xla else "running",
                     "XLA is compiling the graph..." if rt.is_xla else "Training...")
        while self.step_count < cfg.steps:
            while self.later_changes and self.later_changes[0]["step"] <= self.step_count:
                self._change(self.later_changes.pop(0)["settings"], record=False)
            tensors = training.step()
            step = self.step_count
            # A request seen between log steps makes this step a log step: the curve gets the
            # stopped step's point, and the request is acted on after it.
            chunk_over = self.chunk_deadline is not None and time.monotonic() >= self.chunk_deadline
            log_now = (step == 1 or step % cfg.log_every == 0 or step == cfg.steps or chunk_over
                       or self.control.request_waiting())
            if log_now:
                rt.read_later(self._on_values, {"step": _as_tensor(step, tensors), **tensors})
            rt.mark_step()
            self.report.stepped(step)
            self.beat.stepped(step)
            if self.report.batch_shards is None:   # once: how the first batch was split over the devices
                self.report.batch_shards = rt.batch_shards(training.stream.last_batch)
            if grid_due(step, cfg):
                self.save_grid()
            if log_now:
                self._after_log()
            if step % cfg.checkpoint_every == 0:
                self.save_checkpoint()
            if quality_due(step, cfg):
                self._work("measuring quality", self._measure_quality)
                # The phase line read from this measurement, with it: the page shows both at once.
                self._status("running", "Training...")
            if chunk_over and self.step_count < cfg.steps:
                raise SessionEnds("running", f"Chunk {self.report.chunk} ended at step {self.step_count} (checkpoint "
                                             "saved); the next chunk continues the run.")
        self.finish("done", f"Finished {self.step_count} steps.")

    def _on_values(self, values: dict, stepped: str = "") -> None:
        """Runs once the logged step's values exist (a step closure on XLA). stepped: an update the
        host stepped while paused ("both", or "d" / "g" for one net alone), marked so: every one is
        logged, where a run logs every log_every, so the charts draw them apart and the phase rules
        leave them out."""
        step = int(values.pop("step"))
        self.values_finite = all(math.isfinite(v) for v in values.values())
        self.last_values = values
        event = {"step": step, "time": round(self.report.elapsed(), 3), **_rounded(values)}
        if stepped:
            event["stepped"] = True
            if stepped != "both":
                event["updated"] = stepped   # which net alone
        if self.rt.is_xla:   # the graph counters, read after this step's graph ran
            event.update(xla_compiles=self.rt.compile_count(), xla_executions=self.rt.execution_count(),
                         xla_transfers=self.rt.host_transfers())
        self._work("writing the loss log", lambda: self.run_dir.append_event(event))
        self.phase.add(event)

    def _after_log(self) -> None:
        diverged = divergence_message(self.last_values, self.step_count, self.saved_step, self.config.precision)
        if diverged:
            raise SessionEnds("failed", diverged)
        self.warning = self.phase.warning()
        self.apply_settings()
        self.share_cpu()
        decision = self.control.decision()
        if decision == "pause" and self.chunk_seconds is not None:   # the GPU is given back while paused
            raise SessionEnds("paused", paused_message(self.step_count))
        if decision == "pause":
            self._status("paused", paused_message(self.step_count))
            self.beat.doing("paused")
            paused_at, stepping = time.perf_counter(), 0.0
            decision = self.control.wait_while_paused()
            while decision == "step":
                started = time.perf_counter()
                self._step_while_paused(self.control.step_count(), self.control.step_updates())
                stepping += time.perf_counter() - started
                decision = self.control.wait_while_paused()
            self.report.paused(time.perf_counter() - paused_at - stepping)
            self.beat.doing("training")
            self.apply_settings()   # changed while paused: the first step after the pause trains with it
        self._stop_for(decision)
        self._status("running", "Training...")

    def _step_while_paused(self, count: int, updates: str = "both") -> None:
        """A paused run's "Step": exactly `count` generator updates (each with its critic updates;
        of D or G alone: `updates`), every one logged, with the grid and D's verdicts before and
        after; then paused again."""
        before = self.step_count
        count = min(max(count, 1), MAX_STEPS_WHILE_PAUSED, self.config.steps - before)
        if count <= 0:
            self.control.paused_again()
            self._status("paused", f"Paused at step {before}, the run's last: there is nothing left to step.")
            return
        if self.rt.leads and not self.run_dir.has_grid(before):
            self.save_grid()
        self.apply_settings()   # changed while paused: the stepped updates are the first to use them
        for _ in range(count):
            tensors = self.training.step(updates=updates)
            self.rt.read_later(functools.partial(self._on_values, stepped=updates),
                               {"step": _as_tensor(self.step_count, tensors), **tensors})
            self.rt.mark_step()
            self.report.stepped(self.step_count)
        self.save_grid()
        self.control.paused_again()   # the step request is done with: the run stays paused
        self._status("paused", f"Paused at step {self.step_count}: stepped {stepped_words(count, updates)} "
                               f"from step {before}.", before)

    def apply_settings(self) -> None:
        """A settings change the host asked for (core/config.py LIVE_FIELDS), from the next step on:
        written to the run's events (a mark on the charts) and to its plan, so a resumed run, the
        checkpoints and the generator's description train on and say the changed values. A change
        that no longer passes the config's checks (asked of another Blink) is refused in the status."""
        asked = self.control.settings()
        if asked:
            self._change(asked, record=True)

    def _change(self, asked: dict, record: bool) -> None:
        """Train on with the settings `asked` from the next step; record: kept in the plan's history
        (else the history holds it already: a resumed run's change taking effect again at its step)."""
        try:
            changed = self.training.change_settings(asked, self.step_count if record else None)
        except ConfigError as exc:
            self.warning = f"Settings not changed: {exc}"
            return
        if not changed:
            return
        event = {"step": self.step_count, "time": round(self.report.elapsed(), 3), "settings": changed}
        self._work("writing the loss log", lambda: self.run_dir.append_event(event))
        self._work("writing the run's plan", lambda: self.run_dir.write_plan(self.training.plan))

    def share_cpu(self) -> None:
        """The CPU threads asked for through the run directory: fewer while a comparison trains
        beside this run on the same CPU, all again once it ends (app/job.py)."""
        threads = self.control.cpu_threads()
        if threads is not None:
            self.rt.use_cpu_threads(threads)

    def _stop_for(self, decision: str) -> None:
        if decision in ("stop", "gone"):
            raise SessionEnds("stopped", stopped_message(decision, self.step_count))

    def _work(self, what: str, work) -> None:
        """Run the loop's bookkeeping (files, grids, quality): a failure ends the run as `failed`
        with what it was doing, the last good checkpoint kept. Rank 0's alone under torchrun: the
        other processes train and write nothing."""
        if not self.rt.leads:
            return
        doing = self.beat.what
        self.beat.doing(what)
        try:
            work()
        except Exception as exc:
            log_traceback(self.run_dir, what)
            message = f"Training failed while {what} at step {self.step_count}: {describe(exc)}."
            raise SessionEnds("failed", failure_message(self.run_dir, message, saved_step=self.saved_step)) from exc
        finally:
            self.beat.doing(doing)

    def _status(self, state: str, message: str, stepped_from: int = 0) -> None:
        with self.beat.status_lock:   # the heartbeat's compile notice never lands after this write
            self._work("writing the status", lambda: self.report.write(
                state, message, self.step_count, self.saved_step, self.warning, self.training.gan_step.data_seconds,
                stepped_from, phase=self.phase.line(), augment_p=self.last_values.get("augment_p")))

    def save_grid(self) -> None:
        """The fixed-noise grid, and what D believes about each of its images and of the real grid's
        (rank 0's alone under torchrun: no collective runs here)."""
        import torch
        if not self.rt.leads:
            return
        training = self.training
        G = training.G_sampled
        G.eval()
        with torch.no_grad(), self.rt.autocast(self.config.precision):
            images = G(training.fixed_noise_device)
            verdicts = training.verdicts(images)
        G.train()
        fake, real = (values.tolist() for values in verdicts.cpu())
        self._work("saving the sample grid", lambda: (
            self.run_dir.save_grid(images.float().cpu().numpy(), self.step_count, training.grid_columns),
            self.run_dir.save_verdicts(self.step_count, {
                "kind": training.plan.gan.verdict, "columns": training.grid_columns,
                "fake": [round(v, 4) for v in fake], "real": [round(v, 4) for v in real]})))

    def _measure_quality(self) -> None:
        training = self.training
        if self.quality is None:
            import torch
            from core import quality
            # Its nets' initialisation would draw from the run's random numbers: a chunked or resumed
            # run, which builds the meter again, would then draw other noise than an unbroken one.
            with torch.random.fork_rng(devices=[]):
                self.quality = quality.for_dataset(self.config.dataset, training.dataset, training.resolution)
        values = self.quality.measure(training.G_sampled, self.rt.device)
        event = {"step": self.step_count, "time": round(self.report.elapsed(), 3),
                 **{f"quality_{k}": v for k, v in _rounded(values).items()}}
        self.run_dir.append_event(event)
        self.phase.add(event)

    def finish(self, state: str, message: str) -> None:
        if state != "failed":   # a failed run keeps its last good checkpoint, not the weights it failed with
            self.save_checkpoint()
            if not grid_due(self.step_count, self.config):   # the grid shows where the run ended
                self.save_grid()
        self._status(state, message)
        if state != "paused":   # a paused chunk's request stays: the app waits on it to go on
            self.control.ended()
        self.ended = state


def grid_due(step: int, cfg: TrainConfig) -> bool:
    """Grids at step 1, every EARLY_GRID_EVERY steps at first, then every grid_every, and at the end."""
    early = step <= EARLY_GRID_STEPS and step % min(EARLY_GRID_EVERY, cfg.grid_every) == 0
    return step == 1 or early or step % cfg.grid_every == 0 or step == cfg.steps


def quality_due(step: int, cfg: TrainConfig) -> bool:
    """Quality measurements: one early (EARLY_QUALITY_STEP), then every quality_every steps, and at the end."""
    return bool(cfg.quality_every) and (step % cfg.quality_every == 0 or step == cfg.steps
                                        or step == min(EARLY_QUALITY_STEP, cfg.quality_every))


def _as_tensor(step: int, like: dict):
    import torch
    any_tensor = next(iter(like.values()))
    return torch.tensor(float(step), device=any_tensor.device)


def _rounded(values: dict) -> dict:
    return {k: (round(v, 5) if isinstance(v, float) and math.isfinite(v) else v) for k, v in values.items()}


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
    parser.add_argument("--dry-run", action="store_true", help="print the plan (what would train, and why) and exit")
    parser.add_argument("--planned", metavar="RUN_DIR", help=argparse.SUPPRESS)   # the page's runs: their ranks
    return parser


def cli_flags(config: TrainConfig) -> list[str]:
    """The flags that make this CLI train `config` (a field left None keeps its default)."""
    return [item for name, value in config.to_dict().items() if value is not None
            for item in (f"--{name.replace('_', '-')}", str(value))]


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
    """The CLI. Under torchrun (several processes: core/distributed.py) every process runs it: rank 0
    checks the arguments, makes the plan and the run directory (or reads them), and tells the others
    what to train where; they never read it themselves."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = vars(_parser().parse_args(argv))
    from core import distributed
    if args["processes"] > 1 and not distributed.launched():
        print(f"error: processes {args['processes']} are started by torchrun: torchrun --standalone "
              f"--nproc-per-node {args['processes']} -m core.train ... (or Start on the page, which runs it)",
              file=sys.stderr)
        return 2
    ranks = distributed.Ranks.join() if distributed.launched() else None
    leads = ranks is None or ranks.leads
    try:
        prepared = _prepare_run(args, argv, ranks) if leads else None
        problem, plan, run_path, resume, info = ranks.share(prepared) if ranks else prepared
        if problem or run_path is None:
            if leads:
                print(f"error: {problem}" if problem else plan.describe(), file=sys.stderr if problem else sys.stdout)
            return 2 if problem else 0
        run = RunDir(run_path)
        if leads:
            print(f"run directory: {run.path}", flush=True)
        _stop_cleanly_on_signals(run, ranks)
        state = train(plan, run.path, resume=resume, device_info=info, ranks=ranks)
        if leads:
            print(f"{state}: {run.read_status().message}")
        return 0 if state in ("done", "stopped") else 1
    finally:
        if ranks:
            ranks.leave()


def _prepare_run(args: dict, argv: list[str], ranks) -> tuple:
    """(why the CLI refuses, or None; the plan; the run directory, made ready (None: a dry run);
    resume?; the device as probed here, or None)."""
    run_dir, resume, planned, dry_run = (args.pop(name) for name in ("run_dir", "resume", "planned", "dry_run"))
    if planned:   # planned by the page, which started these ranks: from its start, or its checkpoint
        run = RunDir(planned)
        return None, run.read_plan(), run.path, run.has_checkpoint(), None
    where = resume or run_dir
    problem = writable_problem(os.path.dirname(os.path.abspath(where)) if where else default_root())
    if problem and not dry_run:   # before anything is written: a read-only disk would end in a traceback
        return f"{problem}.", None, None, False, None
    try:
        if resume:
            run = RunDir(resume)
            # Flags given explicitly must match the run's plan; only --steps may change.
            given = {a[2:].split("=")[0].replace("-", "_") for a in argv if a.startswith("--")}
            plan, note = prepare_resume(run, args["steps"] if "steps" in given else None,
                                        {name: args[name] for name in given if name in args},
                                        lambda requested: probe_device(requested, ranks), one_process=ranks is None)
            if note:
                print(note, flush=True)
            return None, plan, run.path, True, plan.device   # the device as probed here, as the plan uses it
        info = probe_device(args["device"], ranks)
        plan = plan_run(TrainConfig(**args), info)
    except (ConfigError, ResumeRefused) as exc:
        return str(exc), None, None, bool(resume), None
    except SessionEnds as end:
        return end.message, None, None, bool(resume), None
    if dry_run:
        return None, plan, None, False, info
    return None, plan, RunDir.create(plan, path=run_dir).path, False, info


def _stop_cleanly_on_signals(run: RunDir, ranks=None) -> None:
    """Ctrl-C and SIGTERM stop the CLI's run as Stop on the page does: within a second, with
    a checkpoint and a generator saved, resumable. A second Ctrl-C quits at once. Under torchrun,
    which passes its signal on to every process, rank 0 asks as the CLI does, and another rank
    signalled tells the others at the next step (core.distributed.SharedControl)."""
    import signal
    if ranks is not None and not ranks.leads:
        signal.signal(signal.SIGINT, lambda signum, frame: ranks.ask_to_stop())
        signal.signal(signal.SIGTERM, lambda signum, frame: ranks.ask_to_stop())
        return

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
