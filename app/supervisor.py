"""The trainer process: started, stopped, ended by force when it does not answer, and reaped.

The supervisor owns the one trainer process of the job (app/job.py), forked from the app's fork
server (app/forkserver.py), which paid the imports. It never writes the run: it reports how each
trainer ended through one callback, and the job decides what the run says of it.

    trainer = TrainerSupervisor(lock, on_end=job_ended)
    trainer.start(job, run)    # job: _train_child's arguments
    trainer.watch_stop()       # after a Stop: a trainer that does not answer is ended
    trainer.reap()             # on_end(run, TrainerEnd(...)) once the trainer has exited
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass

from app import chunks, forkserver
from core.failures import ended_by_signal, oom_kills
from core.heartbeat import unanswered
from core.rundir import FINAL_STATES, RunDir, pid_alive

# A healthy trainer answers Stop within about a second; one silent this long, or whose step has not
# returned this long after the click, is stuck (a compile or a data load it reports is waited for).
STOP_ESCALATE_SECONDS = float(os.environ.get("BLINK_STOP_ESCALATE", "20"))
WATCH_SECONDS = 0.5   # how often the Stop watchdog reads the trainer's heartbeat
log = logging.getLogger("blink.job")


@dataclass(frozen=True)
class TrainerEnd:
    """How a trainer process ended, as the supervisor saw it."""
    reason: str           # in words: "it exited with code 1", ended_by_signal's, or why a Stop went unanswered
    clean: bool = False   # it exited with code 0, on its own
    forced: bool = False  # the supervisor ended it: it did not answer a Stop


def _own_process_group() -> None:
    """Make the trainer the leader of its own process group, so the app can end it and anything it
    started together (os.killpg), leaving nothing behind on a device."""
    try:
        os.setpgid(0, 0)
    except OSError:   # already a group leader
        pass


def end_process_group(pgid: int) -> None:
    """SIGKILL whatever is left of a trainer's process group (children of a trainer that died)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:   # no such group: the trainer never made one, or nothing is left of it
        pass


def terminate(process, term_wait: float) -> None:
    """SIGTERM, then SIGKILL, the trainer's whole process group (anything it started goes with it).
    A SIGSTOPped (wedged) process ignores SIGTERM until continued, but SIGKILL always ends it."""
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, None)):
        if not alive(process):
            break
        try:
            os.killpg(process.pid, sig)
        except OSError:   # not a group leader yet (killed while starting up): the process alone
            try:
                os.kill(process.pid, sig)
            except OSError:   # it exited in between
                pass
        process.join(wait)


def _train_child(run_path: str, resume: bool, chunk, parent_pid: int) -> None:
    """Entry point of the trainer process (top level, so the fork server's child can import it): the
    run's plan, as the press that started it wrote it. chunk: a core.train.Chunk when the run trains
    in chunks (app/chunks.py), else None."""
    _own_process_group()
    # In its own group, a terminal's Ctrl-C no longer reaches the trainer; a SIGINT sent to it
    # by hand must not kill it either: the app asks it to stop (checkpoint kept).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if chunk is not None:
        chunks.train_chunk(run_path, resume, chunk, parent_pid)
        return
    # The pid goes into the status at once, so a restarted UI can tell a live trainer that is
    # still loading data from one that died before it ever wrote a status.
    run = RunDir(run_path)
    run.write_status("starting", "Starting the trainer...", pid=os.getpid())
    plan = run.read_plan()
    if plan.device.processes > 1:
        _train_ranks(plan.device.processes, run_path, parent_pid)   # exits with the ranks' code
        return
    from core.train import train
    train(plan, run_path, resume=resume, watch_parent=parent_pid)


def _train_ranks(count: int, run_path: str, parent_pid: int) -> None:
    """A run over `count` processes (DDP), each a rank as torchrun starts one: the CLI (`core.train`'s
    main, training the run's plan) with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, a
    rendezvous on this machine), so the CLI's torchrun road trains it. Forked from this process, whose
    imports are paid and which has touched no device (CUDA does not survive a fork), rather than a
    fresh `python -m core.train` each; and here, not under torchrun itself (whose ranks each get a
    session of their own), so that every rank is in this trainer's process group, where the app's
    Stop escalation and its clean-up reach it. This process waits for them as torchrun does: one that
    fails, or the app gone, and the others are asked to stop (a checkpoint kept), then ended."""
    with socket.socket() as probe:   # a free port for the ranks' rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["--planned", run_path]
    env = {"WORLD_SIZE": str(count), "LOCAL_WORLD_SIZE": str(count), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    fork = multiprocessing.get_context("fork")
    ranks = [fork.Process(target=_rank_child, args=(args, {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}),
                          name=f"blink-rank-{rank}") for rank in range(count)]
    for rank in ranks:
        rank.start()
    # The app's SIGTERM (its Stop escalation) reaches every rank in this group: they stop with a checkpoint.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    asked_at = None
    while any(rank.exitcode is None for rank in ranks):
        failed = any(rank.exitcode not in (None, 0) for rank in ranks)
        if asked_at is None and (failed or not pid_alive(parent_pid)):
            asked_at = time.monotonic()
            for rank in ranks:
                if rank.exitcode is None:
                    rank.terminate()
        if asked_at is not None and time.monotonic() - asked_at > STOP_ESCALATE_SECONDS:
            for rank in ranks:
                if rank.exitcode is None:
                    rank.kill()
        time.sleep(0.2)
    raise SystemExit(next((rank.exitcode for rank in ranks if rank.exitcode), 0))


def _rank_child(args: list[str], rank_env: dict) -> None:
    """Entry point of one rank: the CLI, as `python -m core.train ARGS` runs it under torchrun."""
    os.environ.update(rank_env)
    from core.train import main
    raise SystemExit(main(args))


def _prepare_child(run_path: str) -> None:
    """Entry point of the process that prepares a chunked run's data on the CPU, before its first
    GPU call: a chunk's seconds are then training seconds."""
    _own_process_group()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from core.train import prepare_data
    ready = prepare_data(run_path)
    raise SystemExit(0 if ready else 1)


def alive(process) -> bool:
    """A trainer process is alive as long as the kernel says so, whatever multiprocessing thinks:
    an exit it did not see (its pid reaped by another wait) would otherwise keep the job busy for good."""
    return process.is_alive() and pid_alive(process.pid)


def _start(target, *args):
    """A trainer process, forked from the app's fork server. Not a daemon (a daemonic process may
    start no children of its own): the supervisor's close ends it instead."""
    process = forkserver.context().Process(target=target, args=args, name="blink-trainer")
    process.start()
    return process


class TrainerSupervisor:
    def __init__(self, lock, on_end):
        """lock: the job's, so that reaping a trainer and the job's decisions about its run are one
        sequence; on_end(run, TrainerEnd): called once for each trainer that ended, under the lock."""
        self._lock = lock
        self._on_end = on_end
        self._process = None
        self._run: RunDir | None = None  # the run the trainer process trains
        self._watched = None            # the trainer process a Stop watchdog was started for
        self._forced = ""               # why the supervisor is ending the trainer (an unanswered Stop)
        self._oom_kills_at_start = None  # the kernel's out-of-memory kill count when the trainer started
        self.closing = False

    @property
    def process(self):
        return self._process

    @property
    def run(self) -> RunDir | None:
        """The run of the trainer this supervisor started or was handed (None before any)."""
        return self._run

    def hand_over(self, other: "TrainerSupervisor") -> None:
        """`other` supervises this supervisor's trainer from here on (reaps it, reports its end,
        watches its Stop); this one is free to start another. Both under the job's lock."""
        other._process, other._run, other._forced = self._process, self._run, self._forced
        other._watched, other._oom_kills_at_start = self._watched, self._oom_kills_at_start
        self._process, self._run, self._forced, self._watched = None, None, "", None

    def running(self) -> bool:
        """True while a trainer process is alive."""
        return self._process is not None and alive(self._process)

    def start(self, job: tuple, run: RunDir):
        """A trainer process for job (_train_child's arguments) on `run`."""
        process = _start(_train_child, *job, os.getpid())
        self._process, self._run, self._forced = process, run, ""
        self._oom_kills_at_start = oom_kills()   # to tell, if it dies on SIGKILL, whether memory did it
        return process

    def start_preparing(self, run_path: str):
        """The process that prepares a chunked run's data (_prepare_child); the caller joins it."""
        return _start(_prepare_child, run_path)

    def close(self) -> None:
        """No new trainer from here on (the app is closing)."""
        self.closing = True

    # ---- ending it -----------------------------------------------------------------------------
    def stop(self, grace: float) -> None:
        """Ask the trainer to stop (checkpoint kept) and wait `grace` seconds; then SIGTERM and
        SIGKILL whatever has not ended."""
        process, run = self._process, self._run
        if process is None:
            return
        if alive(process) and run is not None:
            try:
                run.request("stop")
                process.join(grace)
            except OSError:   # a full or read-only disk cannot carry the request: end it below
                pass
        terminate(process, term_wait=5)
        self.reap()

    def settle(self, timeout: float = STOP_ESCALATE_SECONDS) -> None:
        """A trainer writes its final status, then exits: between the two it is still alive.
        A Start or Resume pressed in that moment waits for the exit rather than being refused;
        a trainer that has written its end but not exited within the time a Stop gets has nothing
        left to save, so it is ended."""
        process = self._process
        if process is None or not alive(process) or self._run is None \
                or self._run.read_status().state not in FINAL_STATES:
            self.reap()
            return
        process.join(timeout)
        if alive(process):
            log.warning("The trainer wrote its final status but had not exited after %g s: ending it.", timeout)
            end_process_group(process.pid)   # SIGKILL at once: nothing of the run is left to save
            process.join()
        self.reap()

    def watch_stop(self) -> None:
        """After a Stop: Stop must end the run even if the trainer never reads the request (a wedged
        device, a hung collective). The process object is captured: a later Start's trainer is
        never the one this watchdog ends."""
        process = self._process
        if process is not None and process is not self._watched:
            self._watched = process
            threading.Thread(target=self._end_if_unanswered, args=(process, self._run),
                             name="blink-stop-watchdog", daemon=True).start()

    def _end_if_unanswered(self, process, run: RunDir) -> None:
        """The Stop watchdog: a trainer that has not answered Stop is ended, and reported as forced.
        Not on a clock from the click: the trainer's heartbeat says whether it is busy (compiling,
        loading data: waited for) or stuck (silent, or its step not returning) for
        STOP_ESCALATE_SECONDS (core/heartbeat.py)."""
        asked_at = time.time()
        reason = ""
        while alive(process):
            reason = unanswered(run.read_heartbeat(), time.time(), asked_at, STOP_ESCALATE_SECONDS)
            if reason:
                break
            process.join(WATCH_SECONDS)
        # Under the lock from the kill to the report: a reap in between (any viewer's snapshot)
        # would otherwise report the killed trainer as ended by a signal, not by this watchdog.
        with self._lock:
            if not alive(process) or process is not self._process:
                return   # it answered (or the app already ended it): nothing to do
            self._forced = reason
            terminate(process, term_wait=3)
            self.reap()   # clears the process: Start works again

    def reap(self) -> None:
        """Join a finished trainer and report how it ended (on_end), once."""
        with self._lock:
            process, run = self._process, self._run
            if process is None or alive(process):
                return
            process.join(5)   # at once for an exited process; bounded for one whose exit another wait took
            end_process_group(process.pid)   # anything a dead trainer left behind
            self._process = None
            self._on_end(run, self._how_it_ended(process))

    def _how_it_ended(self, process) -> TrainerEnd:
        code = process.exitcode
        if self._forced:
            return TrainerEnd(self._forced, forced=True)
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
            return TrainerEnd(ended_by_signal(name, self._oom_kills_at_start))
        return TrainerEnd(f"it exited with code {code}", clean=code == 0)
