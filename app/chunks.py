"""Training in chunks: one run as a chain of short trainer sessions, each one GPU call on ZeroGPU.

On a ZeroGPU Space a GPU exists only inside a function decorated with `@spaces.GPU`, while it
runs, for the duration it declares (counted against the visitor's daily quota); a background
trainer never sees one. So there a run trains in chunks: each chunk continues the run from its
checkpoint (weights, optimizers, EMA, step, schedule, random state), trains for its seconds,
saves and returns, and app/job.py starts the next one until the run is done, stopped or paused.
Viewers see one run: the chunks write the same run directory.

The same road runs anywhere with BLINK_CHUNK_SECONDS set (each chunk then a trainer process of
its own), which is how it is tested on the CPU.

    seconds = chunk_seconds(config.device)    # None: train in one piece
    runner = gpu_chunk_runner(seconds)        # on ZeroGPU, made before launch(); else None
"""
from __future__ import annotations

import os

CHUNK_ENV = "BLINK_CHUNK_SECONDS"
# Training seconds per ZeroGPU call. The call declares this plus CALL_MARGIN_SECONDS (the chunk's
# start and its last checkpoint): 60 s, ZeroGPU's default, which a free account's quota allows.
ZERO_GPU_CHUNK_SECONDS = 45
CALL_MARGIN_SECONDS = 15


def on_zero_gpu() -> bool:
    """True on a ZeroGPU Space: the environment variable the `spaces` package itself reads."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def chunk_seconds(device: str) -> float | None:
    """How long each chunk of a run on `device` trains, or None to train in one piece.
    BLINK_CHUNK_SECONDS wins; on ZeroGPU every run but a CPU one is chunked."""
    value = os.environ.get(CHUNK_ENV, "").strip()
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise ValueError(f"{CHUNK_ENV}={value!r}: give the seconds each chunk trains, e.g. 45.")
        return seconds
    if on_zero_gpu() and device != "cpu":
        return float(ZERO_GPU_CHUNK_SECONDS)
    return None


class ChunkRefused(Exception):
    """No GPU was given for a chunk (quota spent, none free): the run pauses with this reason."""


def refused_message(number: int, step: int, reason: str) -> str:
    return (f"Paused at step {step}: no GPU was given for chunk {number} ({reason.strip().rstrip('.')}). "
            "Nothing trained is lost: press Resume to try again later, or start a run with Device: cpu "
            "to train on this machine's CPU.")


def train_chunk(config_dict: dict, run_path: str, resume: bool, chunk, parent_pid: int) -> None:
    """One chunk inside the GPU call (a worker process that `spaces` forks for it)."""
    from core.rundir import RunDir
    from core.train import train
    from core.config import TrainConfig
    run = RunDir(run_path)
    status = run.read_status()
    # The pid at once, as app/job.py _train_child does: the app can tell this chunk began.
    run.write_status(status.state or "starting", status.message or "Starting the trainer...", pid=os.getpid())
    train(TrainConfig.from_dict(config_dict), run_path, resume=resume, watch_parent=parent_pid, chunk=chunk)


def gpu_chunk_runner(seconds: float):
    """On ZeroGPU: a function that trains one chunk inside an `@spaces.GPU` call, raising
    ChunkRefused when ZeroGPU gives no GPU. ZeroGPU wants its functions decorated before the app
    launches (it reports them at start-up), so app.py makes this before launch()."""
    import spaces
    on_gpu = spaces.GPU(duration=int(seconds + CALL_MARGIN_SECONDS))(train_chunk)

    def run_chunk(config_dict: dict, run_path: str, resume: bool, chunk, parent_pid: int) -> None:
        from core.rundir import RunDir
        run = RunDir(run_path)
        pid_before = run.read_status().pid
        try:
            on_gpu(config_dict, run_path, resume, chunk, parent_pid)
        except Exception as exc:   # spaces raises gr.Error: its message is the reason, in words
            reason = str(getattr(exc, "message", "") or exc) or type(exc).__name__
            if run.read_status().pid == pid_before:   # the chunk never began: the GPU was refused
                raise ChunkRefused(reason) from exc
            raise RuntimeError(f"the GPU call ended: {reason}") from exc
    return run_chunk
