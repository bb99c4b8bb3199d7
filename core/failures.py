"""What a failed run tells a student: what happened, what is kept, and a hint at what to change.

The trainer (core/train.py) and the app (app/job.py, for a trainer that died without a word)
write their failures through these, so a student reads the same kind of message from either.
"""
from __future__ import annotations

import math
import os
import re
import traceback

from core.rundir import DiskRefused, RunDir

# Plain-language hints for failures a student will meet (the seed's troubleshooting list).
HINTS = (
    ("out of memory", "The batch is too large for the device's memory: halve the batch size "
                      "(on a Kaggle TPU v3-8, 32 per core is the safe choice)."),
    ("device index out of range", "A device string was hard-coded; Blink asks the runtime for its device, "
                                  "so this points at custom code: remove any 'xla:N' or 'cuda:N' literal."),
    ("not on the same device", "A tensor was created without device=...; create every tensor on the "
                               "runtime's device."),
    ("failed to compile", "XLA could not lower an operation (bilinear Upsample, complex torch.where, custom "
                          "autograd Functions). Use ConvTranspose2d or nearest-neighbour upsampling."),
    ("unsupported operation", "XLA could not lower an operation; replace it with ConvTranspose2d or "
                              "nearest-neighbour upsampling."),
)


def hint_for(message: str) -> str:
    lower = message.lower()
    for needle, hint in HINTS:
        if needle in lower:
            return hint
    return ""



def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has ended since boot (None where
    /proc/vmstat does not say): read before and after, it tells whether a SIGKILL was for memory."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def ended_by_signal(name: str, oom_kills_before: int | None) -> str:
    """Why a trainer that died on signal `name` ended, blaming memory only when the kernel's
    out-of-memory killer acted (or, where that cannot be read, saying that it may have)."""
    if name != "SIGKILL":
        return f"it crashed on {name}"
    now = oom_kills()
    if now is not None and oom_kills_before is not None:
        if now > oom_kills_before:
            return "it was killed (SIGKILL) by the system, which ran out of memory"
        return "it was killed (SIGKILL) from outside (not for memory: the system reports no out-of-memory kill)"
    return ("it was killed (SIGKILL) from outside: by hand, by a supervisor, or by the system short of memory "
            "(if nobody ended it, try a smaller batch size)")


def failure_message(run: RunDir, message: str, saved_step: int | None = None) -> str:
    """The status message for a run that failed: what happened, what is kept, what to do.

    saved_step: the last checkpoint's step when the caller knows it (else the status says)."""
    saved = run.read_status().saved_step if saved_step is None else saved_step
    kept = (f" The last checkpoint (step {saved}) is kept: press Resume to continue from it."
            if saved and run.has_checkpoint() else "")
    hint = hint_for(message)
    return f"{message}{kept}" + (f" Hint: {hint}" if hint else "")


def describe(exc: BaseException) -> str:
    """An exception for the status: a write the disk refused in its plain words, else its type and
    the first line of its text (an XLA or CUDA error's first line names it; the rest is in error.log),
    without the paths of the machine that built a library or runs the server (every viewer reads it):
    a C++ source location goes, a file keeps its name."""
    if isinstance(exc, DiskRefused):
        return str(exc)
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    first = re.sub(r"\[[^\]]*/[^\]]*\]\s*", "", first)           # "[/pytorch/third_party/gloo/.../pair.cc:534] "
    first = re.sub(r"(?<![\w.])/(?:[^\s/:'\"]+/)+([^\s/:'\"]+)", r"\1", first)   # /a/b/c.png -> c.png
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def log_traceback(run: RunDir, header: str) -> None:
    """Append the exception being handled to the run's error.log."""
    try:
        with open(run.file("error.log"), "a") as f:
            f.write(f"[{header}, pid {os.getpid()}]\n{traceback.format_exc()}")
    except OSError:   # a full or read-only disk must not hide the failure being reported
        pass



DIVERGED = "Training diverged at step"   # how a diverged run's message begins: resume reads it


def divergence_message(values: dict, step: int, saved_step: int, precision: str) -> str | None:
    """What a student reads when a logged value is NaN or infinite (None while all are finite):
    which values, what is kept, what to change."""
    bad = ", ".join(k for k, v in values.items() if not math.isfinite(v))
    if not bad:
        return None
    kept = (f"The last good checkpoint (step {saved_step}) is kept." if saved_step
            else "No checkpoint had been saved yet.")
    advice = "fp16 overflowed: train in fp32 or bf16. " if precision == "fp16" else ""
    return (f"{DIVERGED} {step}: {bad} became NaN or infinite. {kept} "
            f"{advice}Try a lower learning rate, or WGAN-GP, which is more stable.")

