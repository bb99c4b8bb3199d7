"""The Train tab's forms: the run's fields laid out by name (their labels, choices and ranges are
TrainConfig's), the settings changed while it trains, the comparisons; the link that presets the
run's fields, and, before Start, how long their run will take here."""
from __future__ import annotations

import math
import re
from urllib.parse import urlencode

import gradio as gr

from app import chunks, views
from core import data, devices, gans
from core.config import (AUGMENT_BELOW, BATCH_SIZE, COMPARISONS, DEVICES, PRECISIONS, PRESETS, ConfigError,
                         TrainConfig, spec, whole_number)
from core.plan import Plan, make_plan
from core.rundir import STEP_UPDATES

# The form's fields, each shown by the TrainTab component of its name: the named API's /start
# parameters, which scripts and the tests pass by name.
FORM_FIELDS = ("dataset", "data_path", "gan", "preset", "batch_size", "precision", "device", "steps",
               "log_every", "grid_every", "checkpoint_every", "conditional", "augment", "seed", "processes")
# URL query parameters that may preset the form (a teacher's "Share this setup" link).
QUERY_FIELDS = ("dataset", "gan", "preset", "batch_size", "precision", "steps", "device")
CHOICE_FIELDS = {name: spec(name)["choices"] for name in QUERY_FIELDS if spec(name)["choices"]}
# The GAN type "auto": what it becomes for the chosen images on this device, the plan says above the form.
AUTO_GAN_LABEL = "Auto: the fastest measured here (Relativistic + R1 for MNIST on a CPU, else DCGAN)"
# What the host's Step (and 10 steps) trains: both nets as the run does, or one alone (the lesson's
# "let D learn alone and watch its verdicts move"): the page's words for core/rundir.py STEP_UPDATES.
STEP_TRAINS = dict(zip(("G and D", "D alone", "G alone"), STEP_UPDATES))
# When a comparison started while the live run trains begins (app/compare.py), as the page says it.
COMPARISON_TIMES = {"at once": "at once, beside it", "after": "after it finishes"}
# The advanced whole-number boxes, in their row's order, with the note each shows under its label.
ADVANCED_NUMBERS = {
    "log_every": "loss points and status updates (Stop and Pause are heard within a second)",
    "grid_every": None, "checkpoint_every": None,
    "seed": "the same seed and settings start the same run; another seed, another run",
    "processes": "0: one per GPU of this machine, each with its share of the batch (DDP); on a CPU one, unless "
                 "you ask for more"}


def precision_choices(info: devices.DeviceInfo) -> list[tuple[str, str]]:
    """Radio choices that mark the precisions this device cannot run (the reasons sit below)."""
    return [(p if p not in info.precision_refused else f"{p} (not on this {info.kind})", p) for p in PRECISIONS]


def batch_size_note(info: devices.DeviceInfo) -> str:
    """The batch size's one meaning (images per step over all devices) and what an empty box means."""
    digits_on_cpu = make_plan(TrainConfig(), devices.DeviceInfo("cpu", "CPU")).config.batch_size
    empty = f"0: the GAN type's, {digits_on_cpu} for MNIST on a CPU, else {BATCH_SIZE}"
    if info.devices > 1:
        batch = make_plan(TrainConfig(), info).config.batch_size
        return (f"images per step over all {info.devices} devices ({empty}): {batch} is {batch // info.devices} per "
                f"device; use a multiple of {info.devices}")
    return f"images per step ({empty})"


def precision_notes(info: devices.DeviceInfo) -> str:
    """Why a precision is refused or comes with a caveat on this device, in full sentences."""
    return "  \n".join(f"**{p}**: {reasons[p]}" for reasons in (info.precision_refused, info.precision_warned)
                        for p in PRECISIONS if p in reasons)


def in_page_words(message: str) -> str:
    """A refusal as the page says it: the config's field names (batch_size, lr_d) become the labels
    beside the fields (the names without an underscore, steps or seed, are words already)."""
    labels = {**{name: spec(name)["label"] for name in FORM_FIELDS if "_" in name}, **views.LIVE_LABELS}
    for name, label in labels.items():
        message = re.sub(rf"\b{name}\b", label, message)
    return message


def setup_from_query(params: dict) -> tuple[dict, list[str]]:
    """Query parameters -> (valid form values, notes on the ignored ones). Never raises."""
    values, notes = {}, []
    for key, raw in params.items():
        if key not in QUERY_FIELDS:
            continue   # other parameters (e.g. gradio's own __theme) are not ours to judge
        raw = str(raw).strip()
        if key in CHOICE_FIELDS:
            if raw in CHOICE_FIELDS[key]:
                values[key] = raw
            else:
                notes.append(f"`{key}={raw[:40]}` ignored: choose one of {', '.join(CHOICE_FIELDS[key])}.")
        else:
            try:
                values[key] = whole_number(raw, key, *spec(key)["range"])
            except ConfigError as exc:
                notes.append(f"`{key}={raw[:40]}` ignored: {exc}")
    return values, notes


def share_query(*values) -> str:
    """The query string of the form's QUERY_FIELDS values, in that order (the valid, given ones)."""
    clean, _ = setup_from_query({k: v for k, v in zip(QUERY_FIELDS, values) if v not in (None, "")})
    return urlencode({k: clean[k] for k in QUERY_FIELDS if k in clean})


def whole_number_box(value, **options) -> gr.Number:
    """A number box for a whole-number field, passed on as typed: Gradio's precision=0 would round
    "2.5" to 2 before the server's check (core/config.py whole_number) could refuse it by name."""
    return gr.Number(value=value, precision=None, **options)


def _field(make, name: str, *choices, **options):
    """Field `name`'s component: TrainConfig's label and default (a None default, the batch's, as 0:
    Gradio shows and sends an empty number box as 0)."""
    default = getattr(TrainConfig, name)
    options.setdefault("value", 0 if default is None else default)
    return make(*choices, label=spec(name)["label"], **options)


def lay_out_main_choices(info: devices.DeviceInfo) -> dict:
    """The main choices, folded once a run starts (the run, not the form, is what the room watches):
    the Settings accordion, its setup note and the fields, by name."""
    with gr.Accordion("Settings", open=True, elem_id="blink-settings") as settings:
        shown = dict(settings=settings, setup_note=gr.Markdown(elem_id="setup-note"))
        with gr.Row():
            shown["dataset"] = _field(gr.Dropdown, "dataset", [(s.label, s.key) for s in data.SOURCES.values()])
            shown["data_path"] = _field(gr.Textbox, "data_path")
            shown["gan"] = _field(gr.Dropdown, "gan", [(AUTO_GAN_LABEL, "auto")] + [(g.label, g.name) for g in gans.GAN_TYPES])
            shown["preset"] = _field(gr.Dropdown, "preset", list(PRESETS), info="auto: a larger network at 64x64 pixels "
                                     "on a TPU or GPU, a small fast one on a CPU (the images' own size, at most 32x32)")
        with gr.Row():
            shown["batch_size"] = _field(whole_number_box, "batch_size", info=batch_size_note(info))
            shown["precision"] = _field(gr.Radio, "precision", precision_choices(info),
                                        value=devices.default_precision(info.kind), info="how many bits each number "
                                        "has: fp32 is full precision; bf16 and fp16 are half, about twice as fast on a TPU or GPU")
            shown["device"] = _field(gr.Dropdown, "device", list(DEVICES))
            shown["steps"] = _field(whole_number_box, "steps")
    return shown


def lay_out_more_choices(info: devices.DeviceInfo) -> dict:
    """Below Start: what the precisions mean on this device, own images, and the advanced fields."""
    gr.Markdown(precision_notes(info), elem_id="precision-notes")
    with gr.Accordion("Dataset: upload your images, preview real ones", open=False):
        with gr.Row():
            shown = dict(upload=gr.File(label="Zip of PNG/JPEG images", file_types=[".zip"], type="filepath"))
            with gr.Column():
                shown["dataset_note"] = gr.Markdown(elem_id="dataset-note")
                shown["dataset_preview"] = gr.Image(label="Real images from the dataset", format="png", type="numpy",
                                                    interactive=False, elem_id="dataset-preview")
    with gr.Accordion("Advanced: labels; augmentation; how often to log, draw a grid and save; seed; processes",
                      open=False):
        shown["conditional"] = _field(gr.Radio, "conditional", [
            ("Use the dataset's labels (class-conditional: ask for a digit)", "auto"), ("Ignore labels (unconditional)", "off")],
            info="Datasets with classes (MNIST, Fashion-MNIST, CIFAR-10) train a class-conditional GAN by default: "
                 "digits appear in about half the steps")
        shown["augment"] = _field(gr.Radio, "augment", [
            (f"Auto: on under {AUGMENT_BELOW:,} images (a class, when the set has classes)", "auto"), ("On", "on"), ("Off", "off")],
            info="D sees images, real and fake, randomly shifted, recoloured and with a square cut out, more "
                 "often as it starts to learn the set by heart (DiffAugment, ADA), so a small set is not memorised")
        with gr.Row():
            shown.update({name: _field(whole_number_box, name, info=note) for name, note in ADVANCED_NUMBERS.items()})
    return shown


def lay_out_live_settings() -> dict:
    """Changed while the run trains or is paused, from its next step: the lesson's "what if D
    learned ten times faster?" without a new run. Text boxes, as a blank one must mean "as it
    is" (an empty number box is sent as 0); the values are checked as numbers on the server."""
    with gr.Accordion("Change while training", open=False, elem_id="blink-live-settings",
                      elem_classes=["blink-host-only"]):
        gr.Markdown("From the next step, marked on the charts, kept when the run is resumed. On a TPU "
                    "the first change, and any change of a beta or of D's updates, compiles the step "
                    "again (seconds to minutes); later changes of the learning rates do not.",
                    elem_id="live-settings-note")
        shown = dict(step_trains=gr.Radio(list(STEP_TRAINS), value="G and D", label="Step trains",
                                          elem_id="live-step-trains"))
        with gr.Row():
            shown["live_settings"] = [gr.Textbox(label=label, placeholder="as it is", elem_id=f"live-{name}")
                                      for name, label in views.LIVE_LABELS.items()]
        shown["change_button"] = gr.Button("Apply from the next step", elem_id="blink-change")
    return shown


def lay_out_comparisons() -> dict:
    """Runs side by side: an earlier run's grid beside the live one and its curves dashed on the
    same charts, for every page; or the seed's experiments, a run again with one change."""
    with gr.Accordion("Compare runs", open=False, elem_id="blink-compare",
                      elem_classes=["blink-host-only"]) as compare_box:
        with gr.Row():
            # Its choices are the runs when it was opened: a name is checked by the job, not the list.
            shown = dict(compare_box=compare_box, compare_with=gr.Dropdown(
                [("The live run alone", "")], value="", label="Compare with", allow_custom_value=True,
                info="an earlier run of the same images, beside the live one"))
            shown["compare_button"] = gr.Button("Show side by side", elem_id="blink-compare-show")
        with gr.Row():
            shown["comparison"] = gr.Dropdown([(words, name) for name, words in COMPARISONS.items()],
                                              value="lr_d", label="Run it again with", info="the same seed and length")
            shown["comparison_when"] = gr.Radio([(words, name) for name, words in COMPARISON_TIMES.items()],
                                                value="at once", label="When",
                                                info="while the live run trains: a CPU gives each run half "
                                                     "its cores; a TPU trains one run at a time")
            shown["comparison_button"] = gr.Button("Start the comparison", elem_id="blink-compare-start")
    return shown

# Images per second (per critic update) of the fast CPU model on a 2-core machine, for the estimate
# before any run here has measured its own (lab/README.md, "History: Speed and start-up").
CPU_FAST_IMAGES_PER_SECOND = 1350
# Seconds per step beyond which a run crawls: loss points, grids and Stop all feel slow.
CRAWL_SECONDS_PER_STEP = 1.0


def measured_images_per_second(runs_root: str, plan: Plan) -> float | None:
    """The newest speed measured on this server by a run of the same settings: device kind and
    processes, model, loss, resolution and batch (a batch-1 run's speed says nothing of batch 128's)."""
    from core.rundir import list_runs
    config = plan.config
    wanted = (plan.device.kind, plan.device.processes, config.preset, config.gan, config.batch_size)
    for run in list_runs(runs_root)[:20]:
        status = run.read_status()
        if ((status.device_kind, status.processes, status.preset, status.gan, status.batch_size) == wanted
                and status.images_per_second and plan.resolution in (None, status.resolution)):
            return status.images_per_second
    return None


def time_note(plan: Plan, runs_root: str) -> str:
    """How long the plan's run takes here (in ZeroGPU's turns there), and a warning when it will crawl."""
    config, info = plan.config, plan.device
    speed = measured_images_per_second(runs_root, plan)
    source = "as a run of these settings measured on this server"
    if speed is None and devices.is_cpu(info.kind) and config.preset == "fast":
        speed, source = CPU_FAST_IMAGES_PER_SECOND / plan.gan.cpu_cost, "rough: no run of these settings has trained here yet"
    turn = chunks.chunk_seconds(config.device) if chunks.on_zero_gpu() else None
    if turn and speed is None:
        return (f"On ZeroGPU a run trains in turns, one GPU call each with {turn:.0f} s of training on {info.name}: "
                "how many steps a turn trains is shown once a first turn has measured it.")
    if speed is None:
        return "Time estimate: shown once the run has measured its speed."
    per_step = config.batch_size * config.n_critic / speed   # the batch is global: split over the devices
    if turn:
        per_turn = turn / per_step
        return (f"On ZeroGPU: each {turn:.0f}-s turn of {info.name} trains about **{per_turn:,.0f} steps**, so "
                f"{config.steps:,} steps take about {math.ceil(config.steps / per_turn):,} turns ({source}).")
    note = (f"About **{views.duration(per_step * config.steps)}** for {config.steps:,} steps on this "
            f"{info.kind.upper()} if nothing else keeps it busy ({source}).")
    return note + ("  \n⚠️ " + crawl_warning(plan, speed, per_step) if per_step > CRAWL_SECONDS_PER_STEP else "")


def crawl_warning(plan: Plan, speed: float, per_step: float) -> str:
    """Why these settings crawl, and changes that would not, worked out from the same speed (never a
    batch that crawls too)."""
    config, n_critic, kind = plan.config, plan.config.n_critic, plan.device.kind
    work = f" ({n_critic} critic updates of {config.batch_size} images each)" if n_critic > 1 else ""
    warning = f"About {per_step:.1f} s a step at batch {config.batch_size}{work}: the curves and grids will crawl."
    # The largest power of two (less what does not split over the devices) under the crawl line.
    batch = 2 ** math.floor(math.log2(max(speed * CRAWL_SECONDS_PER_STEP / n_critic, 1)))
    batch -= batch % plan.device.devices
    fixes = [f"batch {batch} (about {batch * n_critic / speed:.1f} s a step)"] \
        if batch and batch * n_critic / speed <= CRAWL_SECONDS_PER_STEP else []
    if n_critic > 1:
        quicker = [g.label for g in gans.GAN_TYPES if g.defaults.get("n_critic", 1) == 1]
        fixes.append(f"a GAN type with one critic update a step ({', '.join(quicker)})")
    if devices.is_cpu(kind) and config.preset != "fast":
        fixes.append("the fast model size")
    return warning + (" Learning shows much sooner with " + " or ".join(fixes) + "." if fixes else "")
