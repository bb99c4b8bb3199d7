"""Run-directory data -> what the page shows: the plotted series' names and the status line."""
from __future__ import annotations

import math
import re
import time

from core import gans
from core.config import spec
from core.devices import cache_in_words, is_cpu, is_xla
from core.phase import percent
from core.status import Status

# The page's names for what the host may change while a run trains (core/config.py LIVE_FIELDS),
# in its order: the boxes of "Change while training", its answers and refusals, the charts' marks.
LIVE_LABELS = {"lr_g": "G's learning rate", "lr_d": "D's learning rate", "beta1": "Adam beta1", "beta2": "Adam beta2",
               "n_critic": "D updates per G update"}


def settings_words(values: dict) -> str:
    """A settings change as the page says it: "D's learning rate 0.001, D updates per G update 2"."""
    return ", ".join(f"{LIVE_LABELS.get(name, name)} {value:g}" for name, value in values.items())


def _setting(name: str, value) -> str:
    if name == "gan" and value in gans.BY_NAME:
        return gans.BY_NAME[value].label
    return f"{value:g}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)


def _differing(here, there) -> list[tuple[str, str, str]]:
    """(what, its value here, there) for each setting two runs' configs (their plans', resolved) differ in."""
    return [(spec(name)["label"] or LIVE_LABELS.get(name, name.replace("_", " ")),
             _setting(name, getattr(here, name)), _setting(name, getattr(there, name)))
            for name in here.differences(there, ignore=())]


def differences_words(here, there) -> str:
    """What differs between the live run's config and a compared run's (TrainConfigs), as the page
    says it: "D's learning rate 0.03 here, 0.003 there; Seed 1 here, 0 there"."""
    differing = _differing(here, there)
    return "; ".join(f"{what} {mine} here, {theirs} there" for what, mine, theirs in differing) or "the same settings"


def differences_captions(here, there) -> tuple[str, str]:
    """Each grid's caption by what differs, its own values: ("D's learning rate 0.03", "D's learning rate 0.003")."""
    differing = _differing(here, there)
    return ("; ".join(f"{what} {mine}" for what, mine, _ in differing),
            "; ".join(f"{what} {theirs}" for what, _, theirs in differing))


LOSS_SERIES = {"loss_d": "D loss", "loss_g": "G loss"}
QUALITY_PREFIX = "quality_"
# The distance each meter reports (lower is better): one curve on one scale.
QUALITY_DISTANCES = {"quality_fd": "Frechet distance (MNIST classifier features)",
                     "quality_swd": "patch distance: how unlike the real images' small patches (edges, colours, "
                                    "textures, at 2-3 scales) the fakes' are (sliced Wasserstein x1e3)"}
HEALTHY_QUALITY = "Healthy: falls fast in the first few hundred steps, then slowly. A rise: the samples got worse."


# Under the chart of D's statistics, beside what healthy curves look like (app/live.py FRAME_SERIES).
FRAMES_NOTE = (" Dotted, a dot a grid: D on the grid's images after its update, as their frames show; the solid "
               "lines are D on the step's training batch, before its update.")


def healthy_lines(gan: str) -> dict[str, str]:
    """One line under each live plot: what healthy curves look like for the chosen loss."""
    row = gans.BY_NAME.get(gan)
    lines = {**(row.healthy if row else {}), "quality": HEALTHY_QUALITY}
    if row:
        lines["extra"] = lines.get("extra", "") + FRAMES_NOTE
    return lines


def quality_summary(events: list[dict]) -> str:
    """The newest quality point in words, e.g. 'quality: 52% of samples confidently digits, 10/10 digits'."""
    last = next((e for e in reversed(events) if any(k.startswith(QUALITY_PREFIX) for k in e)), None)
    if last is None:
        return ""
    parts = []
    if "quality_confident" in last:
        parts.append(f"{percent(last['quality_confident'])} of samples confidently digits")
    if "quality_classes" in last:
        parts.append(f"{int(last['quality_classes'])}/10 digit classes")
    if "quality_label_match" in last:
        parts.append(f"{percent(last['quality_label_match'])} drawn as the digit asked for")
    for key, label in (("quality_fd", "FD"), ("quality_swd", "patch distance")):
        if isinstance(last.get(key), (int, float)) and math.isfinite(last[key]):
            parts.append(f"{label} {last[key]:.1f}")
    return f"quality at step {last['step']}: " + ", ".join(parts)


def duration(seconds) -> str:
    if seconds is None:
        return "estimating..."
    seconds = int(round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def silence_line(status: Status, now: float) -> str:
    """A trainer silent too long (Job.snapshot's silent_since), in words for everyone watching, with
    what the host can do. The page counts its seconds on (app/static/live.js) by the bold words."""
    since = status.silent_since
    if since is None:
        return ""
    kept = (f"keeps the last checkpoint (step {status.saved_step})" if status.saved_step
            else "has no checkpoint to keep yet")
    act = "Stop is pressed" if status.request == "stop" else "The host can press Stop"
    return (f"⚠️ **Not answering for {max(0.0, now - since):.0f} s**: the trainer has sent no sign of life since "
            f"{time.strftime('%H:%M:%S', time.localtime(since))} (a wedged device or a hung step). "
            f"{act}: the app ends a trainer that does not answer and {kept}.")


def status_line(status: Status, run_name: str = "", events: list[dict] | None = None) -> str:
    """One Markdown line a room can read from the back: device, state, progress, speed, time left."""
    if not status.state:
        # Students read this too, and have no Start: it says what will happen, not what to do.
        return "No run yet: it shows here as soon as **Start** is pressed."
    state = status.state
    # A pending Stop shows in any state until the run ends (Job.snapshot sets request only until then;
    # a Pause pressed after it is refused); a Pause only while the run still trains.
    pending = ("stopping..." if status.request == "stop"
               else "pausing..." if status.request == "pause" and state in ("running", "compiling") else "")
    parts = [f"**{pending or state}**"]
    if status.device and status.processes > 1:   # torchrun's processes: "2 GPUs (DDP, nccl), batch 128 = 64 per GPU"
        parts.append(f"{status.device}, {status.layout}")
    elif status.device:
        split = (f", batch {status.batch_size} = {status.batch_size // status.devices} per device"
                 if status.devices > 1 and status.batch_size else "")
        parts.append(f"{status.device}" + (f" in one process{split}" if status.devices > 1 else ""))
    if status.chunk:   # trained in chunks (app/chunks.py): one GPU call each on ZeroGPU
        parts.append(f"chunk {status.chunk}")
    if status.preset:
        parts.append(f"{status.preset} model" + (f" {status.resolution}x{status.resolution}" if status.resolution else "")
                     + (f", {status.classes} classes" if status.classes else "")
                     + (", augmented" if status.augment.startswith("on") else ""))
    if status.steps:
        parts.append(f"step {status.step} / {status.steps}")
    if status.images_per_second:
        parts.append(f"{status.images_per_second:.0f} img/s")
    if state in ("running", "compiling", "paused"):
        parts.append(f"time left {duration(status.seconds_left)}")
    line = " · ".join(parts)
    message = status.message
    extras = [message] if message and message not in ("Training...",) else []
    if status.phase:   # what is happening, in words (core/phase.py)
        extras.insert(0, f"**Now:** {status.phase}")
    silence = silence_line(status, time.time())   # counted to now: rendered once per change
    if silence:   # first: it is what the host must act on
        extras.insert(0, silence)
    quality = quality_summary(events or [])
    if quality:
        extras.append(quality)
    for caution in (status.notice, status.warning):
        if caution:
            extras.append(f"⚠️ {caution}")
    if run_name:
        extras.append(f"run `{run_name}`")
    return line + ("\n\n" + "  \n".join(extras) if extras else "")


# The Diagnostics panel's rows, in words: what each of the trainer's measures (core/report.py) is.
DIAGNOSTIC_LABELS = {
    "compiles": "XLA graph compilations", "graph_executions": "XLA graph runs",
    "compile_seconds": "Time compiling XLA graphs (left out of the speed and the time left)",
    "compile_cache": "Graphs loaded from the TPU's compilation cache (hits), compiled anew (misses), and found "
                     "there but not loadable by this torch_xla (compiled again)",
    "fallback_ops": "Operations XLA ran on the host instead (CPU fallback)",
    "matmul_precision": "XLA's precision for fp32 matrix products",
    "batch_shards": "Each device's share of a batch", "data_wait_share": "Share of the time spent waiting for data",
    "data_load_seconds": "Loading the dataset took", "first_step_seconds": "The first step took",
    "unreadable_images_skipped": "Unreadable images skipped",
    "augment_p": "Share of D's images augmented now (it rises while D memorises the set)",
    "cpu_threads": "CPU threads this run uses (fewer while a comparison trains beside it)",
}
# Only an XLA run has graphs, compilations and host fallbacks to count.
XLA_ONLY = ("compiles", "graph_executions", "compile_seconds", "fallback_ops", "matmul_precision")
NUMBER_FORMATS = {"fp32": "fp32 (32-bit floating point)", "bf16": "bf16 (16-bit brain floating point)",
                  "fp16": "fp16 (16-bit floating point, with a loss scaler)"}


def devices_in_words(status: Status) -> str:
    """How many devices train, said so that "1 device" beside "CPU (2 cores)" is not a puzzle."""
    if is_cpu(status.device_kind) and (status.processes or 1) == 1:
        cores = re.search(r"\((\d+) cores?\)", status.device or "")
        count = int(cores.group(1)) if cores else 0
        spread = "both its cores" if count == 2 else f"all {count} of its cores" if count > 2 else "its core"
        return f"1 device: the CPU, which spreads each step's work over {spread}"
    return status.layout or f"{status.devices} device" + ("s" if status.devices != 1 else "")


def shares_in_words(shapes: list) -> str:
    """[[32, 1, 28, 28], ...] -> '32 images of 1x28x28 (channels x height x width) on each of 4 devices'."""
    if not shapes:
        return "none"
    first = shapes[0]
    images = f"{first[0]} image{'s' if first[0] != 1 else ''} of {'x'.join(map(str, first[1:]))} (channels x height x width)"
    if len(shapes) == 1:
        return f"{images}, on the one device"
    if all(shape == first for shape in shapes):
        return f"{images} on each of {len(shapes)} devices"
    return "; ".join("x".join(map(str, shape)) for shape in shapes)


def diagnostic_value(key: str, value) -> str:
    if key == "batch_shards":
        return shares_in_words(value)
    if key == "data_wait_share":
        return f"{value:.1%}"
    if key == "augment_p":
        return f"{value:.0%}"
    if key == "compile_cache":
        return cache_in_words(value)
    if key.endswith("_seconds"):
        return f"{value} s"
    if isinstance(value, list):   # operation names
        return ", ".join(map(str, value)) or "none"
    return str(value)


def diagnostics_rows(status: Status) -> list[list[str]]:
    """The run's diagnostics as rows [what, value] in words, for the Diagnostics part of the live panel."""
    diag = dict(status.diagnostics)
    rows = [("Trains on", status.device), ("Devices", devices_in_words(status)),
            ("Batch", f"{status.batch_size} images a step" + (f" ({status.batch_reason})" if status.batch_reason else "")
             if status.batch_size else None),
            ("Number format", NUMBER_FORMATS.get(status.precision, status.precision)),
            ("Model size", f"{status.preset} ({status.preset_reason})"
             + (f", trained at {status.resolution}x{status.resolution}" if status.resolution else "")),
            ("Augmentation of what D sees", status.augment + (" (DiffAugment: colour, shifts, cut-out squares)"
                                                              if status.augment.startswith("on") else "")
             if status.augment else None),
            ("Labels", f"class-conditional on the dataset's {status.classes} classes" if status.classes
             else "unconditional"),
            ("Speed", f"{status.steps_per_second:g} steps a second" if status.steps_per_second else None),
            ("Time training", duration(status.elapsed) if status.elapsed else None)]
    if diag.get("memory_total"):
        rows.append(("Device memory used",
                     f"{diag.pop('memory_used') / 2**30:.2f} of {diag.pop('memory_total') / 2**30:.2f} GiB"))
    xla = is_xla(status.device_kind)
    for key, value in diag.items():
        if value is None or (key in XLA_ONLY and not xla):
            continue
        # A measure the panel has no words for yet still reads as words, not as a field name.
        rows.append((DIAGNOSTIC_LABELS.get(key, key.replace("_", " ").capitalize()), diagnostic_value(key, value)))
    return [[k, str(v)] for k, v in rows if v is not None]


def join_html(page_url: str) -> str:
    """The students' link (the live run without the form) and its QR code, for the host's page."""
    import html
    if not page_url:
        return ""
    url = f"{page_url}?view=watch"
    local = any(host in page_url for host in ("://127.0.0.1", "://localhost", "://[::1]"))
    if local:
        return (f"<p><b>Students:</b> <code>{html.escape(url)}</code> works on this machine only. To let a room "
                "join, start the app with <code>--host 0.0.0.0</code> (same network) or <code>--share</code>.</p>")
    import segno
    # 8 px a module: a QR code about 300 px wide, which a phone reads off a projector from a seat.
    qr = segno.make(url, error="m").svg_inline(scale=8, dark="#111", light="#fff")
    # The link in the summary line too: folded (live.js folds it once a run is shown, so the grid
    # has the projector's first screen), a room can still type it.
    return (f'<details open class="blink-join"><summary style="font-size:1.2rem"><b>Students, watch on your phone:'
            f'</b> <code>{html.escape(url)}</code> <span class="blink-join-hint">(click for the QR code)</span>'
            f'</summary><div style="display:flex;gap:16px;align-items:center;flex-wrap:wrap">'
            f'{qr}<p style="font-size:1.4rem"><a href="{html.escape(url)}">{html.escape(url)}</a></p></div></details>')


def json_safe(value):
    """NaN/inf (a diverged run's last losses) are not JSON: send them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def gan_primer_html() -> str:
    """The live panel's folded "What is a GAN?": G and D for everyone, then each GAN type's losses in a
    section of its own; the panel shows only the watched run's (live.css, by its data-gan)."""
    from html import escape
    from core import gans
    types = "".join(
        f'<div class="primer-gan" data-gan="{g.name}"><h5>This run: {escape(g.label)}</h5>'
        f"<p><b>D's loss.</b> {escape(g.primer['d'])}</p><p><b>G's loss.</b> {escape(g.primer['g'])}</p>"
        f"<p><b>Watch</b> {escape(g.primer['watch'])}</p></div>" for g in gans.GAN_TYPES)
    return ('<details class="live-primer"><summary>What is a GAN? G, D and their losses</summary>'
            "<p><b>G, the generator,</b> turns random noise into an image. It never sees a real image: it "
            "learns only from what D says about its fakes.</p>"
            "<p><b>D, the discriminator,</b> sees real training images and G's fakes and learns to tell them "
            "apart. They take turns: each D step makes D better at telling, each G step makes fakes that D "
            "would take for real. When neither can gain, G's images look like the real ones.</p>"
            "<p><b>The grid</b> is G's images from the same noise all run long: watch noise turn into blobs, "
            "then strokes, then shapes of the dataset.</p>" + types + "</details>")
