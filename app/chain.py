"""A chunked run's chain (app/chunks.py): chunk after chunk, in a thread of the app, until the run is
done, stopped, failed, or paused and then stopped.

Between two chunks the chain decides what a trainer's Loop decides between two steps: go on,
pause, stop. It takes those decisions, and their words, from core/control.py, as the Loop does;
what it adds is the chunk's own: a GPU refused, a call aborted, the data prepared first.

    chain = ChunkChain(job, runner)     # job: app/job.py's, which starts and reaps each chunk's trainer
    chain.start(run, resume, seconds)
    chain.going(); chain.charge_to_presser(); chain.join(timeout)
"""
from __future__ import annotations

import contextvars
import logging
import os
import threading
import time

from app import chunks
from app.supervisor import alive, end_process_group, start_preparing, terminate
from core.control import Control, paused_message, stopped_message
from core.devices import CPU_KINDS
from core.failures import describe
from core.rundir import FINAL_STATES, RunDir

CHUNK_POLL_SECONDS = 0.2   # between chunks, a paused run looks for Resume or Stop this often
log = logging.getLogger("blink.job")


class ChunkChain:
    def __init__(self, job, runner):
        """job: trains a chunk that is no GPU call in its live slot (train_chunk) and says a run the
        chain failed (mark_failed); runner: trains one chunk in a GPU call (app/chunks.py GpuChunks
        on ZeroGPU), None: each chunk is a trainer process of this app's own."""
        self._job, self._runner = job, runner
        self._thread = None
        self._presser = contextvars.copy_context()   # whose quota a chunk's GPU call spends (ZeroGPU)

    def going(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def start(self, run: RunDir, resume: bool, seconds: float) -> None:
        self.charge_to_presser()
        self._thread = threading.Thread(target=self._train_in_chunks, args=(run, resume, seconds),
                                        name="blink-chunks", daemon=True)
        self._thread.start()

    def charge_to_presser(self) -> None:
        """On ZeroGPU each call is charged to the request it is made in: the chunks are made in a copy
        of this press's context (Start, or Resume of a paused run), so they spend the quota of
        whoever pressed last, with that person's own token, not the Space's nor an expired one."""
        self._presser = contextvars.copy_context()

    def _train_in_chunks(self, run: RunDir, resume: bool, seconds: float) -> None:
        """Chunk after chunk, each continuing the run from the last one's checkpoint."""
        from core.train import Chunk
        # The app's own closing is the "gone" here: the chain runs inside the app.
        control = Control(run, app_closing=lambda: self._job.closing)
        # A run on this machine's CPU needs no GPU call.
        on_gpu = self._runner is not None and run.read_plan().asked.device not in CPU_KINDS
        if on_gpu and not resume and not self._prepare_data(run, control):
            return
        number = run.read_status().chunk if resume else 0   # a resumed run's chunks count on
        while True:
            number += 1
            job = (run.path, resume, Chunk(number, seconds))
            try:
                if on_gpu:
                    self._gpu_chunk(run, job, control)
                else:
                    self._job.train_chunk(run, job)
                resume = resume or run.has_checkpoint()
            except Exception as exc:   # the chain itself failed: say so in the run rather than hang
                log.exception("The chunks of run %s ended unexpectedly", run.name)
                self._job.mark_failed(run, f"The trainer ended unexpectedly: {describe(exc)}.")
                return
            if chunks.outcome(run, number) == "never began":
                number -= 1   # the same chunk is asked for again on Resume
            if not self._go_on_after_chunk(run, control):
                return

    def _gpu_chunk(self, run: RunDir, job: tuple, control: Control) -> None:
        """One GPU call, and what ended it, from what the chunk wrote (app/chunks.py outcome)."""
        number = job[2].number
        reason = self._presser.copy().run(self._runner, *job, os.getpid())
        ended = chunks.outcome(run, number)
        if ended == "ended" or run.read_status().state in FINAL_STATES:
            return
        if ended == "aborted":
            chunks.after_abort(run, number, reason or "the GPU call ended")
        elif (decision := control.decision()) in ("stop", "gone"):   # Stop while waiting in ZeroGPU's queue: no GPU was taken
            step = run.read_status().saved_step
            run.write_status("stopped", stopped_message(decision, step, "while waiting for a GPU: no GPU time "
                                                                        "was spent"), step=step, pid=None)
            run.clear_request()
        elif decision == "pause":   # Pause while waiting: it left the queue too; Resume asks again
            run.write_status("paused", chunks.paused_in_queue_message(number, run.read_status().saved_step), pid=None)
        else:
            run.write_status("paused", chunks.refused_message(number, run.read_status().saved_step, reason or ""),
                             pid=None)

    def _prepare_data(self, run: RunDir, control: Control) -> bool:
        """The run's data decoded, resized and cached on the CPU before its first GPU call, with
        the progress on the page; False when the run ended here (a dataset refused, a Stop)."""
        if self._job.closing:   # closing after this look is "gone" to the loop below
            return False
        process = start_preparing(run.path)
        while alive(process):
            process.join(CHUNK_POLL_SECONDS)
            if control.decision() in ("stop", "gone"):
                terminate(process, term_wait=1)
                run.write_status("stopped", "Stopped while preparing the dataset: nothing had trained yet.", pid=None)
                run.clear_request()
        end_process_group(process.pid)
        return run.read_status().state not in FINAL_STATES

    def _go_on_after_chunk(self, run: RunDir, control: Control) -> bool:
        """Between chunks: True to train the next one; else the run ends here, and says why.
        A paused run (a Pause, or a GPU refused) waits here, holding no GPU, for Resume or Stop."""
        while True:
            status = run.read_status()
            if status.state in FINAL_STATES:
                return False
            decision = control.between_chunks(paused=status.state == "paused")
            if decision in ("stop", "gone"):
                run.write_status("stopped", stopped_message(decision, status.saved_step))
                run.clear_request()
                return False
            if decision == "resume":
                run.write_status("running", "Resuming...", pid=None)
                return True
            if decision == "run":
                return True
            if status.state != "paused":   # a Pause the last chunk had no time to hear
                run.write_status("paused", paused_message(status.saved_step))
            time.sleep(CHUNK_POLL_SECONDS)
