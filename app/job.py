"""The one training job of this server, shared by every viewer.

The job starts the trainer in a process of its own (the trainer owns the device; the UI process
never touches one), and reads the run directory for everyone who watches. Stop and pause are
written into the run directory, so they work no matter which process started the run.
A restarted UI adopts the newest run in the runs folder and shows it where it is.

The trainer process itself (its start from the fork server, Stop's escalation, reaping) is
app/supervisor.py's, which tells the job how each trainer ended; a run in chunks is trained by
app/chain.py's ChunkChain. The job decides: which run, whether a press is taken, what a run whose
trainer ended without a word says, and which old runs go.

One run is live (the controls' and the page's); a comparison started at once adds one that trains on
beside it (app/beside.py): presses reach both, and a new Start waits for both.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass, field, replace

from app import views
from app.beside import BesideRun
from app.chain import ChunkChain
from app.chunks import chunk_seconds
from app.compare import Comparison
from app.supervisor import STOP_ESCALATE_SECONDS, TrainerEnd, TrainerSupervisor
from core.plan import Plan
from core.control import stepped_words
from core.rundir import FINAL_STATES, DiskRefused, RunDir, default_root, list_runs, pid_alive, writable_problem
from core.failures import failure_message
from core.heartbeat import silent_since
from core.resume import ResumeRefused, prepare_resume
from core.status import Status

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
SHIPPED_GENERATOR = os.path.join(ASSETS, "generator")
# The trainer reads requests at its log ticks; on a loaded 2-core CPU a tick can be a minute apart.
STOP_GRACE_SECONDS = float(os.environ.get("BLINK_STOP_GRACE", "60"))
KEEP_RUNS = 20          # retention defaults: newest runs kept, and a cap on the runs folder's size
MAX_RUNS_MB = 2000


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
        """chunk_runner: trains one chunk of a chunked run (app/chunks.py GpuChunks on ZeroGPU);
        None: each chunk is a trainer process of this app's own."""
        self.runs_root = runs_root or default_root()
        self.keep_runs = keep_runs if keep_runs is not None else int(os.environ.get("BLINK_KEEP_RUNS", KEEP_RUNS))
        self.max_runs_mb = (max_runs_mb if max_runs_mb is not None
                            else float(os.environ.get("BLINK_MAX_RUNS_MB", MAX_RUNS_MB)))
        # One lock around every decision about the process and the attached run: two Start
        # presses that arrive together are serialised, and the second sees the first's trainer.
        # The supervisor reports a trainer's end under it, and the chain starts its chunks under it.
        self._lock = threading.RLock()
        self._trainer = TrainerSupervisor(self._lock, on_end=self._live_trainer_ended)
        self._beside = BesideRun(self._lock, on_end=self._trainer_ended)   # a comparison started at once
        self._chain = ChunkChain(self._lock, self._trainer, chunk_runner, failed=self._mark_failed)
        self._run: RunDir | None = None
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
        return self._run

    def _attach(self, run: RunDir) -> None:
        self._run = run
        self._snapshot = Snapshot(run_name=run.name, run_path=run.path)
        self._events_offset = 0

    @property
    def closing(self) -> bool:
        """The app is closing: no new trainer starts."""
        return self._trainer.closing

    def is_active(self) -> bool:
        """True while a trainer is alive for the current run."""
        if self._trainer.running() or self._chain.going():
            return True
        if self._run is None:
            return False
        status = self._run.read_status()
        return status.state not in FINAL_STATES and pid_alive(status.pid)

    def busy_message(self) -> str:
        beside = self._beside.training()
        if beside is not None:
            return (f"Run {beside.name} still trains beside the live one: wait for it to end "
                    "(the host can press Stop) before starting another.")
        name = self._run.name if self._run else "?"
        return (f"A run is already training ({name}): one run at a time on this server. Watch it here, "
                "or wait for it to end (the host can press Stop) before starting another.")

    def trains_here(self) -> bool:
        """Whether the live run's trainer is this app's own (not one a restarted app adopted)."""
        return self._trainer.running()

    def beside_training(self) -> RunDir | None:
        """The run that trains on beside the live one (a comparison started at once), if any."""
        return self._beside.training()

    # ---- control ---------------------------------------------------------------------------
    def start(self, plan: Plan, resume_run: RunDir | None = None) -> RunDir:
        """Start a run of `plan` (or resume one, whose plan prepare_resume wrote) in a background
        process; refuse if one is going."""
        with self._lock:
            self._trainer.settle()
            if self.is_active() or self._beside.trainer.running():
                raise JobBusy(self.busy_message())
            self._trainer.reap()
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
                self._trainer.start((run.path, resume_run is not None, None), run)
            return run

    def start_beside(self, plan: Plan) -> RunDir:
        """Start `plan` as the live run now while the current one trains on beside it (a comparison
        at once, app/compare.py, which has checked that the device takes two): the current trainer is
        supervised from here on as the one beside; on a CPU each run takes half the threads."""
        with self._lock:
            earlier = self._run
            if earlier is None or not self._trainer.running() or self._beside.trainer.running():
                raise JobBusy("Two runs at once need one training and no other beside it.")
            problem = writable_problem(self.runs_root)
            if problem:
                raise DiskRefused(problem + ".")
            self.prune(reserve=1)
            run = RunDir.create(plan, self.runs_root)
            self._beside.take_over(self._trainer, earlier, run)
            self._attach(run)
            self._trainer.start((run.path, False, None), run)
            return run

    def resume(self, device, steps: int | None = None) -> tuple[RunDir, str]:
        """Continue the current (stopped, finished or failed) run from its checkpoint; the run, and
        what the presser is told beyond "resuming" (core.resume.prepare_resume's note: its policy
        is the CLI's too). device(requested): the DeviceInfo it trains on (the page's probe).
        steps: the new total (more than the run has done); None keeps the run's own."""
        with self._lock:
            run = self._run
            if run is None:
                raise ResumeRefused("There is no run to resume yet: start one.")
            self._trainer.settle()
            if self.is_active():
                raise JobBusy(self.busy_message())
            plan, note = prepare_resume(run, steps, {}, device)
            return self.start(plan, resume_run=run), note

    def request(self, action: str, count: int = 0, updates: str = "both") -> str:
        """stop | pause | resume | step (count updates, while paused; of both nets, or "d" / "g"
        alone) the current run; returns a message for the user. Which press wins over a pending
        one: RunDir.request."""
        with self._lock:
            run, trainer = self._run, self._trainer
            # A trainer that has written its end is not asked anything (it only has to exit).
            live = run is not None and self.is_active() and run.read_status().state not in FINAL_STATES
            if not live:
                run, trainer = self._beside.training(), self._beside.trainer   # the live run has ended
                if run is None:
                    return "No run is training."
            else:   # two runs at once are paused, stepped and stopped together
                self._beside.ask(action, count, updates)
            pending = run.read_request()
            if action == "step" and pending not in ("stop", "step"):   # those two answer below
                if run.read_status().state != "paused" or pending != "pause":
                    return "Pause first: Step trains one generator update at a time while the run is paused."
                if self._chain.going():
                    return ("Step needs a run that trains in one piece: in chunks (ZeroGPU) a paused run "
                            "holds no GPU to step with.")
            if action == "resume" and pending == "pause" and run.read_status().state != "paused":
                run.clear_request("pause")   # pressed just after a Pause the trainer has not heard: the later press wins
                return "Training on: the Pause pressed just before is cancelled."
            if action == "pause" and pending == "pause" and run.read_status().state == "paused":
                # Only while the trainer still holds the Pause: one that has just taken a Resume (the
                # status not yet written) is paused again by this press.
                return "The run is already paused: press Resume to continue."
            if action == "resume" and self._chain.going():
                self._chain.charge_to_presser()   # the next chunks spend the quota of whoever pressed Resume
            try:
                kept = run.request(action, count, updates)
            except DiskRefused as exc:   # the trainer will fail on its own next write and say so
                return f"Could not ask the trainer to {action}: {exc}."
            if kept == "stop":
                return f"Stopping already: {action.capitalize()} comes too late."
            if kept == "step":
                return "Still stepping: the grid after the last Step comes first."
            if action != "stop" and run.read_status().state in FINAL_STATES:
                # The run ended between the check above and this write (a trainer writes its end, then
                # clears the requests, a Stop's too): the press came too late, and is not left behind.
                run.clear_request(action)
                return "No run is training."
            if action == "stop":
                trainer.watch_stop()   # ended by force if it never answers (a wedged device)
            if action == "pause" and pending == "resume" and run.read_status().state == "paused":
                return "Staying paused: the Resume pressed just before is cancelled."
        return {"stop": "Stopping... the trainer saves a checkpoint and the final grid, then ends.",
                "pause": "Pausing...", "resume": "Resuming...",
                "step": f"Stepping {stepped_words(count, updates)}..."}[action]

    def charge_to_presser(self) -> None:
        """The run's next GPU calls (ZeroGPU) carry the identity of the request this thread serves."""
        with self._lock:
            if self._chain.going():
                self._chain.charge_to_presser()

    def pending_request(self) -> str:
        """The press the live run's trainer has not acted on yet ('' for none)."""
        with self._lock:
            return self._run.read_request() if self._run is not None else ""

    def change_settings(self, values: dict) -> str:
        """Train the current run on with `values` (core/config.py LIVE_FIELDS) from its next step;
        refused (ConfigError, naming the field) by the run's own config checks before the trainer
        is asked, which takes it between two steps (core/control.py Control.settings)."""
        with self._lock:
            run = self._run
            if run is None or not self.is_active() or run.read_status().state in FINAL_STATES:
                return "No run is training."
            run.read_plan().changed(0, values)   # refused as the trainer would refuse it
            try:
                run.change_settings(values)
            except DiskRefused as exc:
                return f"Could not ask the trainer to change its settings: {exc}."
        return f"Changing {views.settings_words(values)} from the next step (marked on the charts)."

    def shutdown(self, grace: float | None = None) -> None:
        """Stop the trainer cleanly (checkpoint kept), escalating only if it does not answer."""
        grace = STOP_GRACE_SECONDS if grace is None else grace
        self._trainer.close()   # no new trainer (nor chunk) from here on
        self._beside.ask("stop", 0, "both")   # asked at once, so the two stop side by side
        chaining = self._chain.going()
        if chaining and self._run is not None:
            try:
                self._run.request("stop")   # heard by the chunk training now, or between chunks
            except OSError:
                pass
        if self._trainer.process is None:
            if chaining:
                self._chain.join(grace)
        else:
            self._trainer.stop(grace)
            if chaining:
                self._chain.join(5)
        self._beside.trainer.stop(grace)

    # ---- how a trainer ended ---------------------------------------------------------------
    def _live_trainer_ended(self, run: RunDir, end: TrainerEnd) -> None:
        self._trainer_ended(run, end)
        self._beside.live_ended(run)

    def _trainer_ended(self, run: RunDir, end: TrainerEnd) -> None:
        """The supervisor's word on how `run`'s trainer ended (under the lock); what the run says of it."""
        status = run.read_status()
        if status.state in FINAL_STATES:
            return   # the trainer said how the run ended (one that wrote its end and hung on exit keeps its words)
        if end.clean and status.chunk:
            return   # a chunk that ended on time: the chain goes on from its checkpoint
        if not end.forced:
            self._mark_failed(run, f"The trainer process ended unexpectedly: {end.reason}.")
            return
        # Ended after a Stop it did not answer: "stopped", as the user asked, naming what is kept.
        kept = (f"The last checkpoint (step {status.saved_step}) is kept: press Resume to continue from it."
                if status.saved_step and run.has_checkpoint()
                else "No checkpoint had been saved yet.")
        try:
            run.write_status("stopped", f"Stopped by force: the trainer did not answer Stop ({end.reason}), "
                                        f"so the app ended it. {kept}")
        except OSError:   # the disk refused: every viewer is told from memory
            self._mark_failed(run, f"The trainer did not answer Stop ({end.reason}), so the app ended it.")
            return
        try:
            run.clear_request()
        except OSError:
            pass

    def _mark_failed(self, run: RunDir, message: str) -> None:
        text = failure_message(run, message)
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
        """Delete the oldest runs beyond keep_runs (minus `reserve` slots) or max_runs_mb.

        Never the attached run nor one whose trainer is alive (another UI may own it).
        Returns the names deleted.
        """
        runs = list_runs(self.runs_root)       # newest first
        protected = {run.path for run in (self._run, self.comparison.run) if run is not None}
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
            self._trainer.reap()
            self._beside.trainer.reap()
            run = self._run
            if run is None:
                return self._snapshot
            status = self._status_of(run)
            if status.state not in FINAL_STATES and status.pid and not pid_alive(status.pid) \
                    and self._trainer.process is None and not self._chain.going() \
                    and time.time() - status.updated > 5:
                self._mark_failed(run, "The trainer process is gone (killed or crashed) without a final status.")
                status = self._status_of(run)
            if status.state not in FINAL_STATES:
                # A pressed Stop or Pause shows at once, before the trainer acts on it.
                status = replace(status, request=run.read_request(), silent_since=self._silent_since(run, status))
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

    @staticmethod
    def _silent_since(run: RunDir, status: Status) -> float | None:
        """When a live trainer that has gone quiet was last heard from (core/heartbeat.py), else
        None: the same bound as the Stop watchdog's, so the page warns before a Stop is pressed.
        It changes twice per silence (falling silent, heard again), so the snapshot does too."""
        # A status written within the bound is a sign of life: no heartbeat to read on a viewer's poll.
        if time.time() - status.updated <= STOP_ESCALATE_SECONDS or not pid_alive(status.pid):
            return None   # heard lately, or no trainer (between chunks, or gone: said otherwise)
        beat = run.read_heartbeat()
        if beat.get("pid") != status.pid:   # an earlier trainer's (a resumed run), or none yet
            beat = {}
        return silent_since(beat, time.time(), STOP_ESCALATE_SECONDS, heard_at=status.updated)

    def generator_dir(self) -> str:
        """Where the Sample tab samples from: the current run once it has a generator, else the shipped one."""
        run = self._run
        if run is not None and run.has_generator():
            return run.path
        return SHIPPED_GENERATOR

    def runs_with_generators(self) -> list[RunDir]:
        """Every run in the runs folder that has saved a generator, newest first: the earlier
        runs a viewer of the Sample tab may pick."""
        return [run for run in list_runs(self.runs_root) if run.has_generator()]
