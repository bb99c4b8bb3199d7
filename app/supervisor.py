"""A trainer process: started, stopped, ended by force when it does not answer, and reaped.

Each of the job's run slots (app/job.py) holds one trainer process, forked from the app's fork
server (app/forkserver.py), which paid the imports. A slot never writes the run: it says how its
trainer ended, and the job decides what the run says of it.

    slot.start(job, run)    # job: _train_child's arguments
    slot.watch_stop()       # after a Stop; slot.end_if_unanswered() then ends a trainer that is stuck
    slot.reap()             # a TrainerEnd once the trainer has exited, else None
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import time
from dataclasses import dataclass

from app import chunks, forkserver
from core.failures import ended_by_signal, oom_kills
from core.heartbeat import silent_since, unanswered
from core.rundir import FINAL_STATES, RunDir, pid_alive
from core.status import Status

# A healthy trainer answers Stop within about a second; one silent this long, or whose step has not
# returned this long after the click, is stuck (a compile or a data load it reports is waited for).
STOP_ESCALATE_SECONDS = float(os.environ.get("BLINK_STOP_ESCALATE", "20"))
WATCH_SECONDS = 0.5   # how often the job's reaper looks at its trainers
log = logging.getLogger("blink.job")


@dataclass(frozen=True)
class TrainerEnd:
    """How a trainer process ended, as its slot saw it."""
    reason: str           # in words: "it exited with code 1", ended_by_signal's, or why a Stop went unanswered
    clean: bool = False   # it exited with code 0, on its own
    forced: bool = False  # the app ended it: it did not answer a Stop


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
    """A run over `count` processes (DDP): each rank the CLI's main with torchrun's environment, so
    the CLI's torchrun road trains it. Forked from this process (imports paid, no device touched: CUDA
    does not survive a fork), not under torchrun (whose ranks get sessions of their own), so every
    rank is in this trainer's process group, where the app's Stop escalation reaches it. Waited for as
    torchrun does: one that fails, or the app gone, and the others are asked to stop, then ended."""
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


def start_preparing(run_path: str):
    """The process that prepares a chunked run's data (_prepare_child); the caller joins it."""
    return _start(_prepare_child, run_path)


def alive(process) -> bool:
    """A trainer process is alive as long as the kernel says so, whatever multiprocessing thinks:
    an exit it did not see (its pid reaped by another wait) would otherwise keep the job busy for good."""
    return process.is_alive() and pid_alive(process.pid)


def _start(target, *args):
    """A trainer process, forked from the app's fork server. Not a daemon (a daemonic process may
    start no children of its own): the job's shutdown ends it instead."""
    process = forkserver.context().Process(target=target, args=args, name="blink-trainer")
    process.start()
    return process


def silent_since_of(run: RunDir, status: Status) -> float | None:
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


class Slot:
    """One of the job's run slots (the live run, or one beside it): a run and its trainer process.
    It takes no lock and writes nothing in the run: the job (app/job.py) calls it under its own."""

    def __init__(self):
        self.run: RunDir | None = None
        self.process = None
        self._stop_asked_at = None       # when this trainer was first asked to Stop (the watchdog's start)
        self._forced = ""                # why the trainer was ended: a Stop it did not answer
        self._oom_kills_at_start = None  # the kernel's out-of-memory kill count when the trainer started

    def running(self) -> bool:
        return self.process is not None and alive(self.process)

    def start(self, job: tuple, run: RunDir):
        """A trainer process for job (_train_child's arguments) on `run`."""
        self.process = _start(_train_child, *job, os.getpid())
        self.run, self._forced, self._stop_asked_at = run, "", None
        self._oom_kills_at_start = oom_kills()   # to tell, if it dies on SIGKILL, whether memory did it
        return self.process

    def stop(self, grace: float) -> None:
        """Wait `grace` seconds for a trainer asked to Stop; then SIGTERM and SIGKILL what is left."""
        process = self.process
        if process is not None:
            process.join(grace)
            terminate(process, term_wait=5)

    def settle(self, timeout: float = STOP_ESCALATE_SECONDS) -> None:
        """A trainer writes its final status, then exits: a Start pressed between the two waits for
        the exit rather than being refused. One that has not exited within the time a Stop gets has
        nothing left to save, so it is ended."""
        process = self.process
        if process is None or not alive(process) or self.run.read_status().state not in FINAL_STATES:
            return
        process.join(timeout)
        if alive(process):
            log.warning("The trainer wrote its final status but had not exited after %g s: ending it.", timeout)
            end_process_group(process.pid)   # SIGKILL at once: nothing of the run is left to save
            process.join()

    def watch_stop(self) -> None:
        """After a Stop: Stop must end the run even if the trainer never reads it (a wedged device,
        a hung collective); end_if_unanswered, from the job's reaper, ends it then."""
        if self.process is not None and self._stop_asked_at is None:
            self._stop_asked_at = time.time()

    def end_if_unanswered(self) -> None:
        """A trainer that has not answered Stop is ended, and its end reported as forced. Not on a
        clock from the click: its heartbeat says whether it is busy (compiling, loading data: waited
        for) or stuck (silent, or its step not returning) for STOP_ESCALATE_SECONDS (core/heartbeat.py)."""
        if self._stop_asked_at is None or not self.running():
            return
        reason = unanswered(self.run.read_heartbeat(), time.time(), self._stop_asked_at, STOP_ESCALATE_SECONDS)
        if reason:
            self._forced = reason
            terminate(self.process, term_wait=3)

    def reap(self) -> TrainerEnd | None:
        """How the trainer ended, once it has exited; None while it lives, and once said."""
        process = self.process
        if process is None or alive(process):
            return None
        process.join(5)   # at once for an exited process; bounded for one whose exit another wait took
        end_process_group(process.pid)   # anything a dead trainer left behind
        self.process = None
        code = process.exitcode
        if self._forced:
            return TrainerEnd(self._forced, forced=True)
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
            return TrainerEnd(ended_by_signal(name, self._oom_kills_at_start))
        return TrainerEnd(f"it exited with code {code}", clean=code == 0)
