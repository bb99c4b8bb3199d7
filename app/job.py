"""The one training job of this server, shared by every viewer.

Each trainer runs in a process of its own (it owns the device; the UI process never touches one);
the job reads the run directory for everyone who watches, and writes presses into it, so they work
whichever process started the run. A restarted UI adopts the newest run where it is.

The job owns the lock and its run slots (app/supervisor.py Slot: a run and its trainer): the live
run first, behind it the run a comparison started at once (app/compare.py) trains on beside. A
press reaches every training slot; one reaper thread says each trainer's end; a run in chunks is
app/chain.py's, in the live slot. The job decides which run, whether a press is taken, what a run
whose trainer ended without a word says, and which old runs go.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field, replace

from app import views
from app.chain import ChunkChain
from app.chunks import chunk_seconds
from app.compare import Comparison
from app.supervisor import WATCH_SECONDS, Slot, TrainerEnd, silent_since_of
from core import devices
from core.plan import Plan
from core.control import stepped_words
from core.rundir import FINAL_STATES, DiskRefused, RunDir, default_root, list_runs, pid_alive, writable_problem
from core.failures import failure_message
from core.resume import ResumeRefused, prepare_resume
from core.status import Status

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
SHIPPED_GENERATOR = os.path.join(ASSETS, "generator")
# The trainer reads requests at its log ticks; on a loaded 2-core CPU a tick can be a minute apart.
STOP_GRACE_SECONDS = float(os.environ.get("BLINK_STOP_GRACE", "60"))
KEEP_RUNS = 20          # retention defaults: newest runs kept, and a cap on the runs folder's size
MAX_RUNS_MB = 2000
ANSWERS = {"stop": "Stopping... the trainer saves a checkpoint and the final grid, then ends.",
           "pause": "Pausing...", "resume": "Resuming..."}


class JobBusy(RuntimeError):
    """A run is already going: one run at a time per server."""


def _dir_mb(path: str) -> float:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return total / 2**20


@dataclass
class Snapshot:
    """What every viewer sees; rebuilt only when the run directory changed."""
    run_name: str = ""
    run_path: str = ""
    status: Status = field(default_factory=Status)
    events: list = field(default_factory=list)
    grid_path: str | None = None
    version: tuple = ()
    events_file: int | None = None   # RunDir.events_identity of the file `events` were read from


class Job:
    def __init__(self, runs_root: str | None = None, keep_runs: int | None = None, max_runs_mb: float | None = None,
                 chunk_runner=None):
        """chunk_runner: trains one chunk in a GPU call (app/chunks.py GpuChunks); None: in a process."""
        self.runs_root = runs_root or default_root()
        self.keep_runs = keep_runs if keep_runs is not None else int(os.environ.get("BLINK_KEEP_RUNS", KEEP_RUNS))
        self.max_runs_mb = (max_runs_mb if max_runs_mb is not None
                            else float(os.environ.get("BLINK_MAX_RUNS_MB", MAX_RUNS_MB)))
        # One lock around every decision about the slots: two Start presses that arrive together are
        # serialised, and the second sees the first's trainer; a trainer's end is reported under it.
        self._lock = threading.RLock()
        self._slots = [Slot()]   # the live run first; behind it, runs that train on beside it
        self._reaper: threading.Thread | None = None
        self.closing = False     # the app is closing: no new trainer (nor chunk) starts
        self._chain = ChunkChain(self, chunk_runner)
        # An earlier run every page shows beside the live one, and a comparison start waiting.
        self.comparison = Comparison(self)
        # A failure the disk would not let us record: (run path, status), shown and retried until it can be.
        self._unsaved_failure: tuple[str, Status] | None = None
        self._snapshot = Snapshot()
        self._events_offset = 0
        runs = list_runs(self.runs_root)
        for run in runs:   # what writes killed with the last app left (a trainer's own are still live)
            run.remove_stale_temp_files()
        if runs:   # a restarted UI shows the newest run where it is
            self._attach(runs[0])

    # ---- the current run -----------------------------------------------------------------
    @property
    def run(self) -> RunDir | None:
        return self._slots[0].run

    def _attach(self, run: RunDir) -> None:
        self._slots[0].run = run
        self._snapshot = Snapshot(run_name=run.name, run_path=run.path)
        self._events_offset = 0

    def is_active(self) -> bool:
        """True while a trainer is alive for the current run."""
        if self._slots[0].running() or self._chain.going():
            return True
        if self.run is None:
            return False
        status = self.run.read_status()
        return status.state not in FINAL_STATES and pid_alive(status.pid)

    def busy_message(self) -> str:
        beside = self.beside_training()
        if beside is not None:
            return (f"Run {beside.name} still trains beside the live one: wait for it to end "
                    "(the host can press Stop) before starting another.")
        name = self.run.name if self.run else "?"
        return (f"A run is already training ({name}): one run at a time on this server. Watch it here, "
                "or wait for it to end (the host can press Stop) before starting another.")

    def trains_here(self) -> bool:
        """Whether the live run's trainer is this app's own (not one a restarted app adopted)."""
        return self._slots[0].running()

    def beside_training(self) -> RunDir | None:
        """The run that trains on beside the live one (a comparison started at once), if any."""
        return next((slot.run for slot in self._training() if slot is not self._slots[0]), None)

    def _training(self) -> list[Slot]:
        """The slots a press reaches: the live one while its run trains, each behind it while its
        trainer lives; none whose trainer has written its end (it only has to exit)."""
        slots = list(self._slots)
        return [slot for slot in slots if slot.run is not None
                and (self.is_active() if slot is slots[0] else slot.running())
                and slot.run.read_status().state not in FINAL_STATES]

    def _refuse_if_busy(self) -> None:
        """Under the lock: a trainer that has written its end is waited for; one training refuses."""
        self._slots[0].settle()
        self._reap()
        if self.is_active() or len(self._slots) > 1:
            raise JobBusy(self.busy_message())

    # ---- control ---------------------------------------------------------------------------
    def start(self, plan: Plan, resume_run: RunDir | None = None) -> RunDir:
        """Start a run of `plan` (or resume one, whose plan prepare_resume wrote); refused if one trains."""
        with self._lock:
            self._refuse_if_busy()
            problem = writable_problem(self.runs_root)
            if problem:   # refused before any trainer is given the run
                raise DiskRefused(problem + ".")
            if resume_run is None:
                self.comparison.forget()   # a new run is shown alone (a comparison's start says what it is beside)
                self.prune(reserve=1)   # the folder stays bounded: old runs go before a new one comes
            run = resume_run or RunDir.create(plan, self.runs_root)
            if resume_run is not None:
                run.write_status("starting", "Resuming...")
            self._attach(run)
            seconds = chunk_seconds(plan.asked.device)
            if seconds:
                self._chain.start(run, resume_run is not None, seconds)
            else:
                self._start_trainer((run.path, resume_run is not None, None), run)
            return run

    def start_beside(self, plan: Plan) -> RunDir:
        """Start `plan` as the live run in a slot in front of the current one, which trains on (a
        comparison at once: app/compare.py checked the device takes two); on a CPU each takes half."""
        with self._lock:
            self._reap()
            earlier = self.run
            if earlier is None or not self._slots[0].running() or len(self._slots) > 1:
                raise JobBusy("Two runs at once need one training and no other beside it.")
            problem = writable_problem(self.runs_root)
            if problem:
                raise DiskRefused(problem + ".")
            self.prune(reserve=1)
            run = RunDir.create(plan, self.runs_root)
            if devices.is_cpu(earlier.read_status().device_kind):
                half = max(1, len(os.sched_getaffinity(0)) // 2)
                for each in (earlier, run):   # written before `run` starts: its trainer reads it at its first step
                    each.share_cpu(half)
            self._slots.insert(0, Slot())
            self._attach(run)
            self._start_trainer((run.path, False, None), run)
            return run

    def resume(self, device, steps: int | None = None) -> tuple[RunDir, str]:
        """Continue the current (ended) run from its checkpoint on `device` (the page's probe), to
        `steps` in all (None: the run's own); the run and prepare_resume's note (the CLI's policy too)."""
        with self._lock:
            run = self.run
            if run is None:
                raise ResumeRefused("There is no run to resume yet: start one.")
            self._refuse_if_busy()
            plan, note = prepare_resume(run, steps, {}, device)
            return self.start(plan, resume_run=run), note

    def request(self, action: str, count: int = 0, updates: str = "both") -> str:
        """stop | pause | resume | step (count updates, while paused; of both nets, or "d" / "g"
        alone) every training run (two at once are paused, stepped and stopped together); the live
        one's answer, for the user. Which press wins over a pending one: RunDir.request."""
        with self._lock:
            answers = [self._press(slot, action, count, updates) for slot in self._training()]
        return answers[0] if answers else "No run is training."

    def _press(self, slot: Slot, action: str, count: int, updates: str) -> str:
        run = slot.run
        pending, state = run.read_request(), run.read_status().state
        if action == "step" and pending not in ("stop", "step"):   # those two answer below
            if state != "paused" or pending != "pause":
                return "Pause first: Step trains one generator update at a time while the run is paused."
            if self._chain.going():
                return ("Step needs a run that trains in one piece: in chunks (ZeroGPU) a paused run "
                        "holds no GPU to step with.")
        if action == "resume" and pending == "pause" and state != "paused":
            run.clear_request("pause")   # pressed just after a Pause the trainer has not heard: the later press wins
            return "Training on: the Pause pressed just before is cancelled."
        if action == "pause" and pending == "pause" and state == "paused":
            # Only while the trainer still holds the Pause: one that has just taken a Resume (the
            # status not yet written) is paused again by this press.
            return "The run is already paused: press Resume to continue."
        if action == "resume" and self._chain.going():
            self._chain.charge_to_presser()   # the next chunks spend the quota of whoever pressed Resume
        try:
            kept = run.request(action, count, updates)
        except DiskRefused as exc:   # the trainer will fail on its own next write and say so
            return f"Could not ask the trainer to {action}: {exc}."
        if kept:
            return {"stop": f"Stopping already: {action.capitalize()} comes too late.",
                    "step": "Still stepping: the grid after the last Step comes first."}[kept]
        state = run.read_status().state
        if action != "stop" and state in FINAL_STATES:
            # The run ended between the check above and this write (a trainer writes its end, then
            # clears the requests, a Stop's too): the press came too late, and is not left behind.
            run.clear_request(action)
            return "No run is training."
        if action == "stop":
            slot.watch_stop()   # ended by force if it never answers (a wedged device)
            self._keep_watch()
        if action == "pause" and pending == "resume" and state == "paused":
            return "Staying paused: the Resume pressed just before is cancelled."
        return ANSWERS.get(action) or f"Stepping {stepped_words(count, updates)}..."

    def charge_to_presser(self) -> None:
        """The run's next GPU calls (ZeroGPU) carry the identity of the request this thread serves."""
        with self._lock:
            if self._chain.going():
                self._chain.charge_to_presser()

    def pending_request(self) -> str:
        """The press the live run's trainer has not acted on yet ('' for none)."""
        with self._lock:
            return self.run.read_request() if self.run is not None else ""

    def change_settings(self, values: dict) -> str:
        """Train the current run on with `values` (core/config.py LIVE_FIELDS) from its next step;
        refused (ConfigError) by the run's own checks before the trainer is asked (Control.settings)."""
        with self._lock:
            run = self.run
            if run is None or not self.is_active() or run.read_status().state in FINAL_STATES:
                return "No run is training."
            run.read_plan().changed(0, values)   # refused as the trainer would refuse it
            try:
                run.change_settings(values)
            except DiskRefused as exc:
                return f"Could not ask the trainer to change its settings: {exc}."
        return f"Changing {views.settings_words(values)} from the next step (marked on the charts)."

    def shutdown(self, grace: float | None = None) -> None:
        """Stop every trainer cleanly (checkpoint kept), escalating only if one does not answer."""
        grace = STOP_GRACE_SECONDS if grace is None else grace
        chaining = self._chain.going()
        with self._lock:
            self.closing = True   # no new trainer (nor chunk) from here on
            slots = list(self._slots)
            for slot in slots:   # asked at once, so they stop side by side
                if slot.running() or (chaining and slot is slots[0]):   # a chunk hears it, or the chain between chunks
                    with suppress(OSError):   # a full or read-only disk cannot carry it: ended below
                        slot.run.request("stop")
        if chaining and slots[0].process is None:
            self._chain.join(grace)
        for slot in slots:
            slot.stop(grace)
        if chaining:
            self._chain.join(5)
        with self._lock:
            self._reap()

    # ---- the trainers ----------------------------------------------------------------------
    def _start_trainer(self, job: tuple, run: RunDir) -> None:
        """Under the lock: the live slot's trainer for job (_train_child's arguments), watched."""
        self._slots[0].start(job, run)
        self._keep_watch()

    def train_chunk(self, run: RunDir, job: tuple) -> None:
        """One chunk of the live run in a trainer process (app/chain.py), its end said as any trainer's."""
        with self._lock:
            if self.closing:
                return
            self._start_trainer(job, run)
            process = self._slots[0].process
        process.join()
        with self._lock:
            self._reap()

    def _keep_watch(self) -> None:
        """Under the lock: the reaper runs while any slot has a trainer."""
        if self._reaper is None or not self._reaper.is_alive():   # none, or one an error ended
            self._reaper = threading.Thread(target=self._reap_while_training, name="blink-reaper", daemon=True)
            self._reaper.start()

    def _reap_while_training(self) -> None:
        """Each trainer's end is reported as it comes, not at a viewer's next look (the one left of
        two takes every thread at once), and a Stop left unanswered ends its trainer."""
        while True:
            with self._lock:
                for slot in self._slots:
                    slot.end_if_unanswered()
                self._reap()
                if all(slot.process is None for slot in self._slots):
                    self._reaper = None
                    return
            time.sleep(WATCH_SECONDS)

    def _reap(self) -> None:
        """Under the lock: each slot's trainer that has exited, said once in its run; a slot behind
        the live one goes with its trainer. Of two runs at once, the one left takes every CPU thread
        again, and the one that ended keeps no share for a later session."""
        for slot in self._slots:
            end = slot.reap()
            if end is None:
                continue
            self._trainer_ended(slot.run, end)
            slot.run.clear_cpu_share()
            for other in self._slots:
                if other.running() and other.run.read_cpu_share() is not None:
                    with suppress(OSError):   # a full disk: it trains on at its share
                        other.run.share_cpu(0)
        self._slots[1:] = [slot for slot in self._slots[1:] if slot.process is not None]

    # ---- how a trainer ended ---------------------------------------------------------------
    def _trainer_ended(self, run: RunDir, end: TrainerEnd) -> None:
        """Under the lock: what `run` says of how its trainer ended."""
        status = run.read_status()
        if status.state in FINAL_STATES:
            return   # the trainer said how the run ended (one that wrote its end and hung on exit keeps its words)
        if end.clean and status.chunk:
            return   # a chunk that ended on time: the chain goes on from its checkpoint
        if not end.forced:
            self.mark_failed(run, f"The trainer process ended unexpectedly: {end.reason}.")
            return
        # Ended after a Stop it did not answer: "stopped", as the user asked, naming what is kept.
        kept = (f"The last checkpoint (step {status.saved_step}) is kept: press Resume to continue from it."
                if status.saved_step and run.has_checkpoint()
                else "No checkpoint had been saved yet.")
        try:
            run.write_status("stopped", f"Stopped by force: the trainer did not answer Stop ({end.reason}), "
                                        f"so the app ended it. {kept}")
        except OSError:   # the disk refused: every viewer is told from memory
            self.mark_failed(run, f"The trainer did not answer Stop ({end.reason}), so the app ended it.")
            return
        with suppress(OSError):
            run.clear_request()

    def mark_failed(self, run: RunDir, message: str) -> None:
        text = failure_message(run, message)
        with self._lock:
            try:
                run.write_status("failed", text)
            except OSError as exc:
                if isinstance(exc, DiskRefused):   # a full or read-only disk: most likely what ended the trainer too
                    text = f"Training failed, and its status could not be saved. {exc}."
                # Every viewer is told from memory; the status is written once the disk takes it (for a restarted UI).
                failed = replace(run.read_status(), state="failed", message=text, updated=time.time())
                self._unsaved_failure = (run.path, failed)

    def _status_of(self, run: RunDir) -> Status:
        """The run's status, with a failure not yet written in its place (written now if the disk lets us)."""
        status = run.read_status()
        unsaved = self._unsaved_failure
        if unsaved is None or unsaved[0] != run.path or status.state in FINAL_STATES:
            return status
        failed = unsaved[1]
        try:
            run.write_status("failed", failed.message)
            self._unsaved_failure = None
        except OSError:
            pass
        return failed

    # ---- retention -------------------------------------------------------------------------
    def prune(self, reserve: int = 0) -> list[str]:
        """Delete (and name) the oldest runs beyond keep_runs (minus `reserve`) or max_runs_mb; never
        the attached or compared run, nor one whose trainer is alive (another UI may own it)."""
        runs = list_runs(self.runs_root)       # newest first
        protected = {run.path for run in (self.run, self.comparison.run) if run is not None}
        for run in runs:
            status = run.read_status()
            if status.state not in FINAL_STATES and pid_alive(status.pid):
                protected.add(run.path)
        keep = max(self.keep_runs - reserve, 0)
        sizes = {run.path: _dir_mb(run.path) for run in runs}
        total = sum(sizes.values())
        deleted = []
        for index in range(len(runs) - 1, -1, -1):     # oldest first
            run = runs[index]
            too_many = index >= keep
            too_big = self.max_runs_mb > 0 and total > self.max_runs_mb
            if not (too_many or too_big) or run.path in protected:
                continue
            shutil.rmtree(run.path, ignore_errors=True)
            total -= sizes[run.path]
            deleted.append(run.name)
        return deleted

    # ---- what viewers see ------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The current run's status, all events and newest grid; cheap when nothing changed."""
        with self._lock:
            self._reap()
            run = self.run
            if run is None:
                return self._snapshot
            status = self._status_of(run)
            if status.state not in FINAL_STATES and status.pid and not pid_alive(status.pid) \
                    and self._slots[0].process is None and not self._chain.going() \
                    and time.time() - status.updated > 5:
                self.mark_failed(run, "The trainer process is gone (killed or crashed) without a final status.")
                status = self._status_of(run)
            if status.state not in FINAL_STATES:
                # A pressed Stop or Pause shows at once, before the trainer acts on it.
                status = replace(status, request=run.read_request(), silent_since=silent_since_of(run, status))
            snapshot = self._snapshot
            events_file, known = run.events_identity(), snapshot.events
            if events_file != snapshot.events_file:   # rewritten (trimmed after an aborted chunk, or for a resume)
                self._events_offset, known = 0, []
            new_events, self._events_offset = run.read_events(self._events_offset)
            grids = run.grids() if (new_events or not snapshot.grid_path
                                    or status.updated != snapshot.status.updated) else None
            if new_events or status != snapshot.status or grids or events_file != snapshot.events_file:
                grid_path = grids[-1][1] if grids else snapshot.grid_path
                self._snapshot = Snapshot(run.name, run.path, status, known + new_events, grid_path,
                                          (run.name, status.updated, events_file, self._events_offset, grid_path,
                                           status.silent_since), events_file)
            return self._snapshot

    def generator_dir(self) -> str:
        """Where the Sample tab samples from: the current run once it has a generator, else the shipped one."""
        run = self.run
        if run is not None and run.has_generator():
            return run.path
        return SHIPPED_GENERATOR

    def runs_with_generators(self) -> list[RunDir]:
        """Every run that has saved a generator, newest first: those the Sample tab may pick."""
        return [run for run in list_runs(self.runs_root) if run.has_generator()]
