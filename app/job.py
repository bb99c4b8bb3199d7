"""The one training job of this server, shared by every viewer.

The job starts the trainer in a `spawn` process (the trainer owns the device; the UI process
never touches one), and reads the run directory for everyone who watches. Stop and pause are
written into the run directory, so they work no matter which process started the run.
A restarted UI adopts the newest run in the runs folder and shows it where it is.
"""
from __future__ import annotations

import contextvars
import logging
import multiprocessing
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field, replace

from app import chunks
from app.chunks import chunk_seconds
from core.config import TrainConfig
from core.rundir import FINAL_STATES, DiskRefused, RunDir, default_root, list_runs, pid_alive, writable_problem
from core.failures import describe, ended_by_signal, failure_message, oom_kills
from core.heartbeat import unanswered
from core.resume import ResumeRefused, prepare_resume
from core.status import Status

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
SHIPPED_GENERATOR = os.path.join(ASSETS, "generator")
# The trainer reads requests at its log ticks; on a loaded 2-core CPU a tick can be a minute apart.
STOP_GRACE_SECONDS = float(os.environ.get("BLINK_STOP_GRACE", "60"))
# A healthy trainer answers Stop within about a second; one silent this long, or whose step has not
# returned this long after the click, is stuck (a compile or a data load it reports is waited for).
STOP_ESCALATE_SECONDS = float(os.environ.get("BLINK_STOP_ESCALATE", "20"))
WATCH_SECONDS = 0.5   # how often the Stop watchdog reads the trainer's heartbeat
KEEP_RUNS = 20          # retention defaults: newest runs kept, and a cap on the runs folder's size
MAX_RUNS_MB = 2000
CHUNK_POLL_SECONDS = 0.2   # between chunks, a paused run looks for Resume or Stop this often
log = logging.getLogger("blink.job")


class JobBusy(RuntimeError):
    """A run is already going: one run at a time per server."""


def _own_process_group() -> None:
    """Make the trainer the leader of its own process group, so the app can end it and anything it
    started together (os.killpg), leaving nothing behind on a device."""
    try:
        os.setpgid(0, 0)
    except OSError:   # already a group leader
        pass


def _end_process_group(pgid: int) -> None:
    """SIGKILL whatever is left of a trainer's process group (children of a trainer that died)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:   # no such group: the trainer never made one, or nothing is left of it
        pass


def _terminate(process, term_wait: float) -> None:
    """SIGTERM, then SIGKILL, the trainer's whole process group (anything it started goes with it).
    A SIGSTOPped (wedged) process ignores SIGTERM until continued, but SIGKILL always ends it."""
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, None)):
        if not _alive(process):
            break
        try:
            os.killpg(process.pid, sig)
        except OSError:   # not a group leader yet (killed while starting up): the process alone
            try:
                os.kill(process.pid, sig)
            except OSError:   # it exited in between
                pass
        process.join(wait)


def _train_child(config_dict: dict, run_path: str, resume: bool, chunk, parent_pid: int) -> None:
    """Entry point of the spawned trainer process (top level, so spawn can import it).
    chunk: a core.train.Chunk when the run trains in chunks (app/chunks.py), else None."""
    _own_process_group()
    # In its own group, a terminal's Ctrl-C no longer reaches the trainer; a SIGINT sent to it
    # by hand must not kill it either: the app asks it to stop (checkpoint kept).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if chunk is not None:
        chunks.train_chunk(config_dict, run_path, resume, chunk, parent_pid)
        return
    # The pid goes into the status at once, so a restarted UI can tell a live trainer that is
    # still loading data from one that died before it ever wrote a status.
    RunDir(run_path).write_status("starting", "Starting the trainer...", pid=os.getpid())
    from core.train import train
    train(TrainConfig.from_dict(config_dict), run_path, resume=resume, watch_parent=parent_pid)


def _prepare_child(config_dict: dict, run_path: str, device_kind: str) -> None:
    """Entry point of the process that prepares a chunked run's data on the CPU, before its first
    GPU call: a chunk's seconds are then training seconds."""
    _own_process_group()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from core.train import prepare_data
    ready = prepare_data(TrainConfig.from_dict(config_dict), run_path, device_kind)
    raise SystemExit(0 if ready else 1)


def _standby_main(connection, parent_pid: int) -> None:
    """A trainer process started ahead of time: it pays the imports (torch: ~1.5 s on 2 cores)
    while nobody waits, then trains the first job sent to it. Start then shows its first loss
    point in well under a second instead of after a cold process start."""
    _own_process_group()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from core.train import warm_up
    warm_up()
    try:
        job = connection.recv()   # (config_dict, run_path, resume); EOF when the app closes
    except (EOFError, OSError):
        return
    if job is not None:
        _train_child(*job, parent_pid)


def _dir_mb(path: str) -> float:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return total / 2**20


def _alive(process) -> bool:
    """A trainer process is alive as long as the kernel says so, whatever multiprocessing thinks:
    an exit it did not see (its pid reaped by another wait) would otherwise keep the job busy for good."""
    return process.is_alive() and pid_alive(process.pid)


def _spawn(target, *args):
    """A trainer process: `spawn`, because fork with torch's threads can deadlock. Not a daemon
    (a daemonic process may start no children of its own): Job.shutdown ends it instead."""
    process = multiprocessing.get_context("spawn").Process(target=target, args=args, name="blink-trainer")
    process.start()
    return process


@dataclass
class Snapshot:
    """What every viewer sees; rebuilt only when the run directory changed."""
    run_name: str = ""
    run_path: str = ""
    status: Status = field(default_factory=Status)
    events: list = field(default_factory=list)
    grid_path: str | None = None
    version: tuple = ()


class Job:
    def __init__(self, runs_root: str | None = None, keep_runs: int | None = None, max_runs_mb: float | None = None,
                 standby: bool = False, chunk_runner=None):
        """chunk_runner: trains one chunk of a chunked run (app/chunks.py gpu_chunk_runner on
        ZeroGPU); None: each chunk is a trainer process of this app's own."""
        self.runs_root = runs_root or default_root()
        self.keep_runs = keep_runs if keep_runs is not None else int(os.environ.get("BLINK_KEEP_RUNS", KEEP_RUNS))
        self.max_runs_mb = (max_runs_mb if max_runs_mb is not None
                            else float(os.environ.get("BLINK_MAX_RUNS_MB", MAX_RUNS_MB)))
        # One lock around every decision about the process and the attached run: two Start
        # presses that arrive together are serialised, and the second sees the first's trainer.
        self._lock = threading.RLock()
        self._process = None
        self._standby = None            # (process, connection) of a pre-started trainer, if enabled
        self._use_standby = standby
        self._shutting_down = False
        self._watched = None            # the trainer process a Stop watchdog was started for
        self._chain = None              # the thread that trains a chunked run chunk after chunk
        self._chunk_runner = chunk_runner
        self._presser = contextvars.copy_context()   # whose quota a chunk's GPU call spends (ZeroGPU)
        self._oom_kills_at_start = None  # the kernel's out-of-memory kill count when the trainer started
        self._run: RunDir | None = None
        # A failure the disk would not let us record: (run path, status), shown and retried until it can be.
        self._unsaved_failure: tuple[str, Status] | None = None
        self._snapshot = Snapshot()
        self._events_offset = 0
        runs = list_runs(self.runs_root)
        for run in runs:   # what writes killed with the last app left (a trainer's own are still live)
            run.remove_stale_temp_files()
        if runs:   # a restarted UI shows the newest run where it is
            self._attach(runs[0])
        self._ensure_standby()

    # ---- the current run -----------------------------------------------------------------
    @property
    def run(self) -> RunDir | None:
        return self._run

    def _attach(self, run: RunDir) -> None:
        self._run = run
        self._snapshot = Snapshot(run_name=run.name, run_path=run.path)
        self._events_offset = 0

    def is_active(self) -> bool:
        """True while a trainer is alive for the current run."""
        if self._process is not None and _alive(self._process):
            return True
        if self._chaining():
            return True
        if self._run is None:
            return False
        status = self._run.read_status()
        return status.state not in FINAL_STATES and pid_alive(status.pid)

    def _settle(self, timeout: float = STOP_ESCALATE_SECONDS) -> None:
        """A trainer writes its final status, then exits: between the two it is still alive.
        A Start or Resume pressed in that moment waits for the exit rather than being refused;
        a trainer that has written its end but not exited within the time a Stop gets has nothing
        left to save, so it is ended."""
        process = self._process
        if process is None or not _alive(process) or self._run is None \
                or self._run.read_status().state not in FINAL_STATES:
            self._reap()
            return
        process.join(timeout)
        if _alive(process):
            log.warning("The trainer wrote its final status but had not exited after %g s: ending it.", timeout)
            _end_process_group(process.pid)   # SIGKILL at once: nothing of the run is left to save
            process.join()
        self._reap()

    def busy_message(self) -> str:
        name = self._run.name if self._run else "?"
        return (f"A run is already training ({name}): one run at a time on this server. Watch it here, "
                "or wait for it to end (the host can press Stop) before starting another.")

    # ---- control ---------------------------------------------------------------------------
    def start(self, config: TrainConfig, resume_run: RunDir | None = None) -> RunDir:
        """Start a run (or resume one) in a background process; refuse if one is going."""
        with self._lock:
            self._settle()
            if self.is_active():
                raise JobBusy(self.busy_message())
            self._reap()
            problem = writable_problem(self.runs_root)
            if problem:   # refused before any trainer is given the run
                raise DiskRefused(problem + ".")
            if resume_run is None:
                self.prune(reserve=1)   # the folder stays bounded: old runs go before a new one comes
            run = resume_run or RunDir.create(config, self.runs_root)
            if resume_run is not None:   # prepare_resume has checked it and made it ready
                run.write_config(config)
                run.write_status("starting", "Resuming...")
            self._attach(run)
            seconds = chunk_seconds(config.device)
            if seconds:
                self._start_chain(config, run, resume_run is not None, seconds)
            else:
                self._start_trainer((config.to_dict(), run.path, resume_run is not None, None))
            return run

    def _start_trainer(self, job: tuple):
        """A trainer process for job (_train_child's arguments): the warm standby if there is one."""
        process = self._take_standby(job)
        if process is None:
            process = _spawn(_train_child, *job, os.getpid())
        self._process = process
        self._oom_kills_at_start = oom_kills()   # to tell, if it dies on SIGKILL, whether memory did it
        return process

    # ---- a run in chunks (app/chunks.py) ---------------------------------------------------
    def _chaining(self) -> bool:
        return self._chain is not None and self._chain.is_alive()

    def _start_chain(self, config: TrainConfig, run: RunDir, resume: bool, seconds: float) -> None:
        self._charge_to_presser()
        self._chain = threading.Thread(target=self._train_in_chunks, args=(config, run, resume, seconds),
                                       name="blink-chunks", daemon=True)
        self._chain.start()

    def _charge_to_presser(self) -> None:
        """On ZeroGPU each call is charged to the request it is made in: the chunks are made in a copy
        of this press's context (Start, or Resume of a paused run), so they spend the quota of
        whoever pressed last, with that person's own token, not the Space's nor an expired one."""
        self._presser = contextvars.copy_context()

    def _train_in_chunks(self, config: TrainConfig, run: RunDir, resume: bool, seconds: float) -> None:
        """Chunk after chunk, each continuing the run from the last one's checkpoint, until the run
        is done, stopped, failed, or paused and then stopped."""
        from core.train import Chunk
        on_gpu = self._chunk_runner is not None and config.device != "cpu"   # a CPU run needs no GPU call
        if on_gpu and not resume and not self._prepare_data(config, run):
            return
        number = run.read_status().chunk if resume else 0   # a resumed run's chunks count on
        while True:
            number += 1
            job = (config.to_dict(), run.path, resume, Chunk(number, seconds))
            try:
                if on_gpu:
                    self._gpu_chunk(run, job)
                else:
                    self._train_chunk_in_process(job)
                resume = resume or run.has_checkpoint()
            except Exception as exc:   # the chain itself failed: say so in the run rather than hang
                log.exception("The chunks of run %s ended unexpectedly", run.name)
                with self._lock:
                    self._mark_failed(run, f"The trainer ended unexpectedly: {describe(exc)}.")
                return
            if chunks.outcome(run, number) == "never began":
                number -= 1   # the same chunk is asked for again on Resume
            if not self._go_on_after_chunk(run):
                return

    def _gpu_chunk(self, run: RunDir, job: tuple) -> None:
        """One GPU call, and what ended it, from what the chunk wrote (app/chunks.py outcome)."""
        number = job[3].number
        reason = self._presser.copy().run(self._chunk_runner, *job, os.getpid())
        ended = chunks.outcome(run, number)
        if ended == "ended" or run.read_status().state in FINAL_STATES:
            return
        if ended == "aborted":
            chunks.after_abort(run, number, reason or "the GPU call ended")
        elif run.read_request() == "stop":   # Stop while waiting in ZeroGPU's queue: no GPU was taken
            status = run.read_status()
            run.write_status("stopped", f"Stopped by request at step {status.saved_step}, while waiting for a "
                                        "GPU: no GPU time was spent.", step=status.saved_step, pid=None)
            run.clear_request()
        else:
            run.write_status("paused", chunks.refused_message(number, run.read_status().saved_step, reason or ""),
                             pid=None)

    def _prepare_data(self, config: TrainConfig, run: RunDir) -> bool:
        """The run's data decoded, resized and cached on the CPU before its first GPU call, with
        the progress on the page; False when the run ended here (a dataset refused, a Stop)."""
        with self._lock:
            if self._shutting_down:
                return False
            process = _spawn(_prepare_child, config.to_dict(), run.path, self._chunk_runner.device_kind)
        while _alive(process):
            process.join(CHUNK_POLL_SECONDS)
            if run.read_request() == "stop" or self._shutting_down:
                _terminate(process, term_wait=1)
                run.write_status("stopped", "Stopped while preparing the dataset: nothing had trained yet.", pid=None)
                run.clear_request()
        _end_process_group(process.pid)
        return run.read_status().state not in FINAL_STATES

    def _train_chunk_in_process(self, job: tuple) -> None:
        with self._lock:
            if self._shutting_down:
                return
            process = self._start_trainer(job)
            self._ensure_standby(for_next_chunk=True)   # the next chunk's trainer warms up meanwhile
        process.join()
        with self._lock:
            self._reap()   # a chunk that died is the run's failure, said as any trainer's

    def _go_on_after_chunk(self, run: RunDir) -> bool:
        """Between chunks: True to train the next one; else the run ends here, and says why.
        A paused run (a Pause, or a GPU refused) waits here, holding no GPU, for Resume or Stop."""
        while True:
            status = run.read_status()
            if status.state in FINAL_STATES:
                return False
            request = run.read_request()
            if self._shutting_down or request == "stop":
                run.write_status("stopped", "Stopped: the app that started this run has closed. Resume it from the "
                                            "UI or CLI." if self._shutting_down
                                 else f"Stopped by request at step {status.saved_step}.")
                run.clear_request()
                return False
            if request == "resume":
                run.clear_request("resume")   # a Stop pressed meanwhile stays
                run.write_status("running", "Resuming...", pid=None)
                return True
            if status.state != "paused" and request != "pause":
                return True
            if status.state != "paused":   # a Pause the last chunk had no time to hear
                run.write_status("paused", f"Paused at step {status.saved_step}.")
            time.sleep(CHUNK_POLL_SECONDS)

    def _ensure_standby(self, for_next_chunk: bool = False) -> None:
        """Start the next warm trainer while no run needs the CPU (at UI start, after a run), or
        for the next chunk of a chunked run."""
        if self._use_standby and self._standby is None and (for_next_chunk or not self.is_active()) \
                and not self._shutting_down:
            parent_end, child_end = multiprocessing.get_context("spawn").Pipe()
            self._standby = (_spawn(_standby_main, child_end, os.getpid()), parent_end)
            child_end.close()

    def _take_standby(self, job: tuple):
        """Hand a job to the warm trainer; None if there is none (or it died)."""
        standby, self._standby = self._standby, None
        if standby is None:
            return None
        process, connection = standby
        try:
            if process.is_alive():
                connection.send(job)
                return process
        except OSError:
            pass
        finally:
            connection.close()
        process.join(1)
        return None

    def _close_standby(self) -> None:
        standby, self._standby = self._standby, None
        if standby is not None:
            process, connection = standby
            connection.close()          # EOF: the standby returns without training
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
            _end_process_group(process.pid)

    def resume(self, steps: int | None = None, config: TrainConfig | None = None) -> RunDir:
        """Continue the current (stopped, finished or failed) run from its checkpoint.

        steps: the new total (more than the run has done); None keeps the run's own. config:
        what the caller wants the run to be; any difference other than steps is refused. The
        policy is core.resume.prepare_resume's, the CLI's too.
        """
        with self._lock:
            run = self._run
            if run is None:
                raise ResumeRefused("There is no run to resume yet: start one.")
            self._settle()
            if self.is_active():
                raise JobBusy(self.busy_message())
            new_config = prepare_resume(run, steps, config.to_dict() if config is not None else None)
            return self.start(new_config, resume_run=run)

    def request(self, action: str, count: int = 0) -> str:
        """stop | pause | resume | step (count updates, while paused) the current run; returns a
        message for the user. Which press wins over a pending one: RunDir.request."""
        with self._lock:
            run = self._run
            # A trainer that has written its end is not asked anything (it only has to exit).
            if run is None or not self.is_active() or run.read_status().state in FINAL_STATES:
                return "No run is training."
            pending = run.read_request()
            if action == "step" and pending not in ("stop", "step"):   # those two answer below
                if run.read_status().state != "paused" or pending != "pause":
                    return "Pause first: Step trains one generator update at a time while the run is paused."
                if self._chaining():
                    return ("Step needs a run that trains in one piece: in chunks (ZeroGPU) a paused run "
                            "holds no GPU to step with.")
            if action == "resume" and self._chaining():
                self._charge_to_presser()   # the next chunks spend the quota of whoever pressed Resume
            try:
                kept = run.request(action, count)
            except DiskRefused as exc:   # the trainer will fail on its own next write and say so
                return f"Could not ask the trainer to {action}: {exc}."
            if kept == "stop":
                return f"Stopping already: {action.capitalize()} comes too late."
            if kept == "step":
                return "Still stepping: the grid after the last Step comes first."
            process = self._process
            if action == "stop" and process is not None and process is not self._watched:
                # Stop must end the run even if the trainer never reads the request (a wedged
                # device, a hung collective). The process object is captured: a later Start's
                # trainer is never the one this watchdog ends.
                self._watched = process
                threading.Thread(target=self._end_if_unanswered, args=(process, run),
                                 name="blink-stop-watchdog", daemon=True).start()
        return {"stop": "Stopping... the trainer saves a checkpoint and the final grid, then ends.",
                "pause": "Pausing...", "resume": "Resuming...",
                "step": f"Stepping {count} generator update{'s' if count != 1 else ''}..."}[action]

    def shutdown(self, grace: float | None = None) -> None:
        """Stop the trainer cleanly (checkpoint kept), escalating only if it does not answer."""
        grace = STOP_GRACE_SECONDS if grace is None else grace
        # No new standby from here on: reaping the stopped trainer below would otherwise spawn
        # one, and the exiting app would wait for that child (multiprocessing joins it at exit).
        self._shutting_down = True
        self._close_standby()
        chain, process = self._chain, self._process
        if chain is not None and chain.is_alive() and self._run is not None:
            try:
                self._run.request("stop")   # heard by the chunk training now, or between chunks
            except OSError:
                pass
        if process is None:
            if chain is not None:
                chain.join(grace)
            return
        if _alive(process) and self._run is not None:
            try:
                self._run.request("stop")
                process.join(grace)
            except OSError:   # a full or read-only disk cannot carry the request: end it below
                pass
        _terminate(process, term_wait=5)
        self._reap()
        if chain is not None:
            chain.join(5)

    def _end_if_unanswered(self, process, run: RunDir) -> None:
        """The Stop watchdog: a trainer that has not answered Stop is ended, and the run says so as
        "stopped" (the user asked for it), naming what is kept. Not on a clock from the click: the
        trainer's heartbeat says whether it is busy (compiling, loading data: waited for) or stuck
        (silent, or its step not returning) for STOP_ESCALATE_SECONDS (core/heartbeat.py)."""
        asked_at, step_at_ask = time.time(), run.read_heartbeat().get("step", 0)
        while _alive(process):
            reason = unanswered(run.read_heartbeat(), time.time(), asked_at, step_at_ask, STOP_ESCALATE_SECONDS)
            if reason:
                break
            process.join(WATCH_SECONDS)
        # Under the lock from the kill to the status write: a _reap in between (any viewer's
        # snapshot) would otherwise call the killed trainer "ended unexpectedly".
        with self._lock:
            if not _alive(process) or process is not self._process:
                return   # it answered (or the app already ended it): nothing to do
            _terminate(process, term_wait=3)
            status = run.read_status()
            if status.state not in FINAL_STATES:   # a trainer that wrote its end and hung on exit keeps its words
                kept = (f"The last checkpoint (step {status.saved_step}) is kept: press Resume to continue from it."
                        if status.saved_step and run.has_checkpoint()
                        else "No checkpoint had been saved yet.")
                try:
                    run.write_status("stopped", f"Stopped by force: the trainer did not answer Stop ({reason}), "
                                                f"so the app ended it. {kept}")
                    run.clear_request()
                except OSError:   # the disk refused: _reap reports the kill as a failure instead
                    pass
            self._reap()   # clears self._process and starts the next standby: Start works again

    def _reap(self) -> None:
        """Join a finished trainer; if it died without a final status, say so in the run."""
        process = self._process
        if process is None or _alive(process):
            return
        process.join(5)   # at once for an exited process; bounded for one whose exit another wait took
        _end_process_group(process.pid)   # anything a dead trainer left behind
        self._process = None
        self._ensure_standby()
        run = self._run
        status = run.read_status() if run is not None else None
        if process.exitcode == 0 and status is not None and status.chunk:
            return   # a chunk that ended on time: the chain goes on from its checkpoint
        if status is not None and status.state not in FINAL_STATES:
            code = process.exitcode
            if code is not None and code < 0:
                name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
                reason = ended_by_signal(name, self._oom_kills_at_start)
            else:
                reason = f"it exited with code {code}"
            self._mark_failed(run, f"The trainer process ended unexpectedly: {reason}.")

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
        protected = {self._run.path} if self._run is not None else set()
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
            run = self._run
            if run is None:
                return self._snapshot
            status = self._status_of(run)
            if status.state not in FINAL_STATES and status.pid and not pid_alive(status.pid) \
                    and self._process is None and not self._chaining() and time.time() - status.updated > 5:
                self._mark_failed(run, "The trainer process is gone (killed or crashed) without a final status.")
                status = self._status_of(run)
            if status.state not in FINAL_STATES:
                # A pressed Stop or Pause shows at once, before the trainer acts on it.
                status = replace(status, request=run.read_request())
            new_events, self._events_offset = run.read_events(self._events_offset)
            grids = run.grids() if (new_events or not self._snapshot.grid_path
                                    or status.updated != self._snapshot.status.updated) else None
            snapshot = self._snapshot
            if new_events or status != snapshot.status or grids:
                grid_path = grids[-1][1] if grids else snapshot.grid_path
                self._snapshot = Snapshot(run.name, run.path, status, snapshot.events + new_events, grid_path,
                                          (run.name, status.updated, self._events_offset, grid_path))
            return self._snapshot

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
