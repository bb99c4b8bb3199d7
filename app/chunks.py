"""Training in chunks: one run as a chain of short trainer sessions, each one GPU call on ZeroGPU.

On a ZeroGPU Space a GPU exists only inside a function decorated with `@spaces.GPU`, while it
runs, for the duration it declares (counted against the presser's daily quota); a background
trainer never sees one. So there a run trains in chunks: each chunk continues the run from its
checkpoint (weights, optimizers, EMA, step, schedule, random state), trains for its seconds,
saves and returns, and app/chain.py starts the next one until the run is done, stopped or paused.
Viewers see one run: the chunks write the same run directory.

What ended a chunk is read from what it wrote, never from pids (ZeroGPU runs the next call in the
same worker): its number in the status when it begins, `chunk_ended` once its checkpoint is saved.
One that never wrote its number was never given a GPU; one that began but never ended was aborted.

With BLINK_CHUNK_SECONDS set the same road runs anywhere (each chunk a trainer process of its own),
as the CPU tests run it; tests/zerogpu/ runs the real `spaces` against a stand-in of ZeroGPU's API.

    seconds = chunk_seconds(config.device)    # None: train in one piece
    runner = GpuChunks(seconds)               # on ZeroGPU, made before launch()
"""
from __future__ import annotations

import math
import os
import time

from core.devices import CPU_KINDS, DeviceInfo, cuda_info
from core.rundir import RunDir

CHUNK_ENV = "BLINK_CHUNK_SECONDS"
# Training seconds per ZeroGPU call: with the call's start and its last checkpoint, a chunk asks
# for about 60 s, ZeroGPU's default duration, of which a free account's daily quota holds three.
ZERO_GPU_CHUNK_SECONDS = 45
# What a call needs besides training (the worker's start, the nets and optimizers, the checkpoint
# read and written), until a chunk of this run has measured it.
FIRST_CALL_MARGIN_SECONDS = 15
# ZeroGPU's own variables, which tell `spaces` (and Gradio) that this process is a Space's main
# process: a spawned child that inherited them would patch torch to report a GPU it does not have.
ZERO_GPU_VARIABLES = ("SPACES_ZERO_GPU", "SPACES_ZERO_DEVICE_API_URL")
# The GPU a ZeroGPU call gets unless the Space says otherwise (`spaces` reads the same variable).
ZERO_GPU_DEFAULT_NAME = "NVIDIA H200 MIG 3g.71gb"


def on_zero_gpu() -> bool:
    """True on a ZeroGPU Space: the environment variable the `spaces` package itself reads."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def clear_zero_gpu_environment() -> None:
    """First thing in a child process the app spawns (the trainer of a CPU run, viewer work, the
    device probe): it is no Space main process, and must not act as one."""
    for name in ZERO_GPU_VARIABLES:
        os.environ.pop(name, None)


def zero_gpu_device() -> DeviceInfo:
    """The GPU each chunk gets on ZeroGPU, described for the page: the UI process sees no GPU
    (nor may it initialise CUDA), so the preset, precisions and estimates come from this."""
    name = os.environ.get("ZEROGPU_CUDA_DEVICE_NAME", ZERO_GPU_DEFAULT_NAME)
    info = cuda_info(f"{name} (ZeroGPU)", bf16=True)
    info.notice = ("ZeroGPU: the run trains in turns, one GPU call of about a minute each, charged to whoever "
                   "pressed Start or Resume.")
    return info


# How often the host's open page hands a chunked run its fresh identity (the ZeroGPU token lasts a
# few minutes: about 170 s in one report), so an unattended run's calls never carry an expired one.
IDENTITY_SECONDS = 60
ANONYMOUS_PRESS = ("This press is anonymous, so ZeroGPU would charge this network's shared quota (2 minutes a day), "
                   "not yours: press it on the Space's huggingface.co page while signed in to use your own. "
                   "The room watches on the direct address.")


def anonymous_press() -> bool:
    """Whether the press this thread serves carries no ZeroGPU identity: no token (Gradio's browser
    client sends one only from the Space's huggingface.co page: client/js/src/helpers/zerogpu.ts
    posts its handshake only inside that frame), or one whose payload says it fell back to IP-based
    quotas. Read with `spaces`' own header name and decoder, as its schedule() reads them: it would
    then charge every chunk of the run to the network's quota."""
    from gradio.context import LocalContext
    from spaces.zero.client import TOKEN_HEADER
    from spaces.zero.utils import jwt_payload
    headers = getattr(LocalContext.request.get(None), "headers", None) or {}
    token = headers.get(TOKEN_HEADER.lower())
    if not token:
        return True
    try:
        payload = jwt_payload(token)
    except (ValueError, IndexError):
        return True
    return not isinstance(payload, dict) or bool(payload.get("error"))


def spends_gpu_quota(device: str) -> bool:
    """Whether a run on `device` here trains in ZeroGPU calls, each charged to whoever pressed."""
    return on_zero_gpu() and chunk_seconds(device) is not None


def chunk_seconds(device: str) -> float | None:
    """How long each chunk of a run on `device` trains, or None to train in one piece.
    BLINK_CHUNK_SECONDS wins; on ZeroGPU every run but one on the CPU (XLA:CPU too) is chunked."""
    value = os.environ.get(CHUNK_ENV, "").strip()
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise ValueError(f"{CHUNK_ENV}={value!r}: give the seconds each chunk trains, e.g. 45.")
        return seconds
    if on_zero_gpu() and device not in CPU_KINDS:
        return float(ZERO_GPU_CHUNK_SECONDS)
    return None


# ---- what ended a chunk ---------------------------------------------------------------------
def outcome(run: RunDir, number: int) -> str:
    """'ended' (checkpoint saved), 'aborted' (began, never ended) or 'never began', from what
    chunk `number` wrote into the run's status."""
    status = run.read_status()
    if status.chunk_ended >= number:
        return "ended"
    return "aborted" if status.chunk >= number else "never began"


def paused_in_queue_message(number: int, step: int) -> str:
    return (f"Paused at step {step} while chunk {number} waited for a GPU: it left ZeroGPU's queue, so no GPU "
            "time was spent. Press Resume to queue for one again.")


def refused_message(number: int, step: int, reason: str) -> str:
    if "expired" in reason.lower():   # ZeroGPU's "Expired ZeroGPU proxy token"
        return (f"Paused at step {step}: no GPU was given for chunk {number} ({_words(reason)}): the identity of the "
                "last press has expired. Nothing trained is lost: press Resume on the Space's huggingface.co page, "
                "where the page sends a fresh one (and keeps it fresh while it stays open).")
    return (f"Paused at step {step}: no GPU was given for chunk {number} ({_words(reason)}). "
            "Nothing trained is lost: press Resume to try again later, or start a run with Device: cpu "
            "to train on this machine's CPU.")


def aborted_message(number: int, step: int, saved_step: int, reason: str) -> str:
    lost = step - saved_step
    return (f"Paused at step {saved_step}: chunk {number} was aborted while training, at step {step} "
            f"({_words(reason)}). The {lost} step{'s' if lost != 1 else ''} since the checkpoint at step "
            f"{saved_step} {'are' if lost != 1 else 'is'} lost; press Resume to go on from there.")


def _words(reason: str) -> str:
    return reason.strip().rstrip(".") or "no reason given"


def after_abort(run: RunDir, number: int, reason: str) -> None:
    """The run as its checkpoint left it: the aborted chunk's events go, and the page says what was lost."""
    status = run.read_status()
    run.trim_events(status.saved_step)
    run.write_status("paused", aborted_message(number, status.step, status.saved_step, reason),
                     step=status.saved_step, pid=None)


# ---- one chunk ----------------------------------------------------------------------------
def train_chunk(run_path: str, resume: bool, chunk, parent_pid: int) -> None:
    """One chunk, in the process that has the GPU: `spaces`' worker on ZeroGPU (forked for the
    first call, kept for the next ones), or a trainer process of the app's own."""
    from core.train import train
    began = time.monotonic()
    run = RunDir(run_path)
    status = run.read_status()
    # The pid and the number at once: the app can tell this chunk began. A later chunk keeps what
    # the run says (viewers see one run going on, not a restart).
    going_on = chunk.number > 1 and status.state in ("running", "compiling", "paused")
    run.write_status(status.state if going_on else "starting", status.message if going_on else "Starting the trainer...",
                     pid=os.getpid(), chunk=chunk.number)
    train(run.read_plan(), run_path, resume=resume, watch_parent=parent_pid, chunk=chunk)
    ended = run.read_status()
    # What the call spent besides training, for the next calls' duration (call_seconds): the most any
    # call of the run spent, as any call may need a new worker (after an abort, or when ZeroGPU
    # gives another GPU), which costs what the first one did.
    margin = max(time.monotonic() - began - (ended.elapsed - status.elapsed), status.chunk_margin, 0.0)
    run.write_status(ended.state, ended.message, chunk_ended=chunk.number, chunk_margin=round(margin, 1))


def call_seconds(chunk, run_path: str) -> int:
    """The duration a chunk's GPU call asks for: its training seconds, or fewer when the run's
    steps left take less at the speed its chunks measured, plus what a call needs besides
    training as the last chunk measured it. What ZeroGPU charges is this times its node's factor."""
    status = RunDir(run_path).read_status()
    training = chunk.seconds
    if status.steps_per_second and status.steps:
        training = min(training, 1.2 * (status.steps - status.step) / status.steps_per_second)
    # Half again what was measured: a call past its duration is killed.
    margin = 1.5 * status.chunk_margin if status.chunk_ended else FIRST_CALL_MARGIN_SECONDS
    return max(math.ceil(training + margin), 5)


class ChunkCall:
    """What `spaces` looks for in Gradio's context while a chunk's call waits for and holds a GPU.

    A chunk is no Gradio event of its own (it runs long after the Start press returned), so this
    stands in for one, through the names `spaces` 0.51 reads (zero/gradio.py get_event,
    get_server_port; gradio.helpers.log_message): its messages ("Waiting for a GPU...") become the
    run's status, and it is no longer `alive` once Stop or Pause is pressed, which makes `spaces`
    leave ZeroGPU's queue without taking a GPU (a paused run holds none: Resume asks again)."""

    def __init__(self, blocks, run: RunDir, number: int):
        self._id = f"blink-chunk-{number}"
        self._queue = self
        self.active_jobs = [[self]]
        self.server = getattr(blocks, "server", None)   # its sockets are closed in the forked worker
        self.run, self.number = run, number

    @property
    def alive(self) -> bool:
        return self.run.read_request() not in ("stop", "pause")

    def log_message(self, event_id=None, log="", title="", level="info", duration=None, visible=True) -> None:
        if log.startswith("Waiting for a GPU") and self.run.read_status().state != "waiting":
            self.run.write_status("waiting", f"Waiting for a GPU for chunk {self.number}: {log.rstrip('.')} in "
                                             "ZeroGPU's queue. Nothing is charged while waiting; Stop leaves the "
                                             "queue.", pid=None)

    def set_progress(self, *args, **kwargs) -> None:
        pass


class GpuChunks:
    """On ZeroGPU: trains one chunk inside an `@spaces.GPU` call. ZeroGPU wants its functions
    decorated before the app launches (it reports them at start-up), so app.py makes this then,
    and `attach`es the page once built (the forked worker closes the page's sockets)."""

    def __init__(self):
        import spaces
        self.blocks = None
        self._on_gpu = spaces.GPU(duration=call_seconds_of)(train_chunk)

    def attach(self, blocks) -> None:
        self.blocks = blocks

    def __call__(self, run_path: str, resume: bool, chunk, parent_pid: int) -> str | None:
        """Train the chunk; None when the call ended as the chunk did, else ZeroGPU's reason in
        words (a refusal, an expired token, an aborted call); the caller reads `outcome`."""
        from gradio.context import LocalContext
        LocalContext.blocks.set(ChunkCall(self.blocks, RunDir(run_path), chunk.number))
        LocalContext.event_id.set(f"blink-chunk-{chunk.number}")
        try:
            self._on_gpu(run_path, resume, chunk, parent_pid)
        except Exception as exc:   # spaces raises gr.Error: its message is the reason, in words
            return str(getattr(exc, "message", "") or exc) or type(exc).__name__
        return None


def call_seconds_of(run_path: str, resume: bool, chunk, parent_pid: int) -> int:
    """`spaces.GPU`'s duration callable: it takes the decorated function's arguments."""
    return call_seconds(chunk, run_path)
