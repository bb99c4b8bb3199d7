"""The Blink page: Train tab (form, live status, plots, sample grid) and Sample tab.

One person (the host) trains, everyone who opens the page watches the same run. With a host
key (BLINK_HOST_KEY or `python app.py --host-key KEY`), Start / Stop / Pause / Resume need the
key, checked here on the server; without one, anyone may press them.

Nothing on the page polls: the live panel (status, curves, grid) is pushed to every viewer by one
watcher of the run (app/live.py), so a viewer costs the server work only when the trainer writes.
`?view=watch` is the student's view: the live run without the form, laid out for a phone.
Named endpoints (start, stop, pause, resume, status, sample, interpolate) let gradio_client
drive the app; /live/status serves scripts that wait for changes.
"""
from __future__ import annotations

import hmac
import math
import os
import re
import threading
import time
from urllib.parse import urlencode

import gradio as gr

from app import chunks, dataset_work, forkserver, sample_tab, serving, viewer_work, views
from app.dataset_work import check_data_path
from app.errors import REFUSAL_TOAST_CSS, log_refusal, refused
from app.patches import name_bad_values
from app.compare import ComparisonRefused
from app.job import Job, JobBusy, ResumeRefused
from app.live import LiveFeed, live_grid_url
from core import data, devices
from core.plan import Plan, make_plan, plan_run
from core.rundir import FINAL_STATES, STEP_UPDATES, DiskRefused
from core import gans
from core.config import (AUGMENT_BELOW, BATCH_SIZE, COMPARISONS, DEVICES, LIVE_FIELDS, PRECISIONS, PRESETS, ConfigError,
                         TrainConfig, comparison, form_number, spec, whole_number)

# The live panel's markup; app/static/live.js fills it from /live/events.
LIVE_PANEL = """
<div class="live">
  <div class="live-grid"><div class="placeholder">Samples from fixed noise appear at the first step</div>
    <div class="live-pair">
      <div class="live-own"><div class="tiles"><img class="fakes" alt="Samples from fixed noise" hidden>
        <div class="verdicts"></div></div><p class="own-caption" hidden></p></div>
      <div class="live-compare" hidden><div class="tiles"><img class="compared" alt="The compared run's grid">
        <div class="verdicts"></div></div>
        <p class="compare-caption"></p></div></div>
    <div class="live-before" hidden><h4>Before the last Step: step <span class="before-step"></span></h4>
      <div class="tiles"><img class="before" alt="The grid before the last Step"><div class="verdicts"></div></div></div>
    <div class="live-real" hidden><h4>Real images: what D must tell G's images from</h4>
      <div class="tiles"><img class="reals" alt="Real images from the dataset"><div class="verdicts"></div></div></div>
    <p class="verdict-legend" hidden></p><p class="verdict-readout" hidden></p></div>
  <div class="live-side">
    <a class="live-primer-link" href="#">What are G and D?</a>
    <div class="live-status">No run yet: it shows here as soon as <b>Start</b> is pressed.</div>
    <p class="live-compare-note" hidden></p>
    <div class="live-controls"><label><input class="live-verdicts" type="checkbox" checked> D's verdicts</label>
      <label>Smoothing <input class="live-smoothing" type="range" min="0" max="0.99"
      step="0.01" value="0.6"></label> <label><input class="live-log" type="checkbox"> log scale</label></div>
    <div class="live-chart"><h4>Losses</h4><svg data-chart="losses" viewBox="0 0 600 260"></svg>
      <div class="legend"></div><p class="healthy"></p></div>
    <div class="live-chart"><h4>What the discriminator sees</h4><svg data-chart="extra" viewBox="0 0 600 260"></svg>
      <div class="legend"></div><p class="healthy"></p></div>
    <div class="live-chart"><h4>Quality: distance to real images (lower is better)</h4>
      <svg data-chart="quality" viewBox="0 0 600 260"></svg><div class="legend"></div><p class="healthy"></p></div>
    PRIMER
    <details class="live-diagnostics"><summary>Diagnostics</summary><table><tbody></tbody></table></details>
  </div>
</div>""".replace("PRIMER", views.gan_primer_html())
# The whole page's CSS: the student's view hides the host's controls; once a run exists the live
# panel comes first (above the form), and the intro gives way to it.
PAGE_CSS = """
body.blink-watch .blink-host-only { display: none !important; }
body.blink-presenting #blink-controls, body.blink-presenting #blink-message { order: -2; }
body.blink-presenting #join-link, body.blink-presenting #live { order: -1; }
body.blink-presenting .blink-intro { display: none !important; }
#blink-message.blink-stale { display: none; }
#blink-controls .blink-cannot { opacity: 0.4; }
"""
PAGE_CSS += sample_tab.SAMPLE_CSS   # the Sample tab's outputs, sized for a projector
PAGE_CSS += REFUSAL_TOAST_CSS        # a refusal's toast is headed "Not done", not Gradio's "Error"

# When a comparison started while the live run trains begins (app/compare.py), as the page says it.
COMPARISON_TIMES = {"at once": "at once, beside it", "after": "after it finishes"}

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


def _static(name: str) -> str:
    with open(os.path.join(STATIC, name)) as f:
        return f.read()



class DeviceCache:
    """Device probes, each in a fork of the app's fork server (the UI never imports torch_xla; the
    fork server has imported torch already), and kept."""

    def __init__(self):
        self._infos: dict[str, devices.DeviceInfo] = {}
        self._lock = threading.Lock()

    def get(self, requested: str = "auto") -> devices.DeviceInfo:
        with self._lock:
            if requested not in self._infos:
                # On ZeroGPU no process sees the GPU but a chunk's GPU call: the page describes that GPU.
                on_gpu_call = chunks.on_zero_gpu() and (requested == "auto" or devices.is_cuda(requested))
                self._infos[requested] = (chunks.zero_gpu_device() if on_gpu_call
                                          else devices.probe_in_child_process(requested, forkserver.context()))
            return self._infos[requested]


def precision_choices(info: devices.DeviceInfo) -> list[tuple[str, str]]:
    """Radio choices that mark the precisions this device cannot run (the reasons sit below)."""
    return [(p if p not in info.precision_refused else f"{p} (not on this {info.kind})", p) for p in PRECISIONS]


# The GAN type "auto": what it becomes for the chosen images on this device, the plan says above the form.
AUTO_GAN_LABEL = "Auto: the fastest measured here (Relativistic + R1 for MNIST on a CPU, else DCGAN)"


def batch_size_note(info: devices.DeviceInfo) -> str:
    """The batch size's one meaning (images per step over all devices), what an empty box means, and
    the other view of it."""
    one_cpu = devices.DeviceInfo("cpu", "CPU")
    digits_on_cpu = make_plan(TrainConfig(), one_cpu).config.batch_size   # the default images' on a CPU: auto's type's
    empty = f"0: the GAN type's, {digits_on_cpu} for MNIST on a CPU, else {BATCH_SIZE}"
    if info.devices > 1:
        batch = make_plan(TrainConfig(), info).config.batch_size
        return (f"images per step over all {info.devices} devices ({empty}): {batch} is {batch // info.devices} per "
                f"device; use a multiple of {info.devices}")
    return f"images per step ({empty})"


def precision_notes(info: devices.DeviceInfo) -> str:
    """Why a precision is refused or comes with a caveat on this device, in full sentences."""
    notes = [f"**{p}**: {info.precision_refused[p]}" for p in PRECISIONS if p in info.precision_refused]
    notes += [f"**{p}**: {info.precision_warned[p]}" for p in PRECISIONS if p in info.precision_warned]
    return "  \n".join(notes)


def in_page_words(message: str) -> str:
    """A refusal as the page says it: the config's field names (batch_size, lr_d) become the labels
    the person sees beside the field (Batch size, D's learning rate). The form's names without an
    underscore (steps, seed) are words already."""
    labels = {**{name: spec(name)["label"] for name in FORM_FIELDS if "_" in name}, **views.LIVE_LABELS}
    for name, label in labels.items():
        message = re.sub(rf"\b{name}\b", label, message)
    return message


# The form: TrainConfig fields (their labels, choices and ranges are TrainConfig's), each shown by
# the TrainTab component of its name: the named API's /start parameters, which scripts and the tests
# pass by name (the host key as `key`).
FORM_FIELDS = ("dataset", "data_path", "gan", "preset", "batch_size", "precision", "device", "steps",
               "log_every", "grid_every", "checkpoint_every", "conditional", "augment", "seed", "processes")
# URL query parameters that may preset the form (a teacher's "Share this setup" link).
QUERY_FIELDS = ("dataset", "gan", "preset", "batch_size", "precision", "steps", "device")
CHOICE_FIELDS = {name: spec(name)["choices"] for name in QUERY_FIELDS if spec(name)["choices"]}


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


def share_query(dataset, gan, preset, batch_size, precision, steps, device) -> str:
    values = dict(dataset=dataset, gan=gan, preset=preset, batch_size=batch_size, precision=precision,
                  steps=steps, device=device)
    clean, _ = setup_from_query({k: v for k, v in values.items() if v not in (None, "")})
    return urlencode({k: clean[k] for k in QUERY_FIELDS if k in clean})


def _forget_upload(path: str) -> None:
    """Remove Gradio's copy of an uploaded file once it is checked: kept (copied into the dataset
    cache, whose size is capped) or refused, it is not needed, so the upload folder holds at most
    the uploads being checked. Only a file inside the upload folder is touched."""
    folder = os.path.realpath(gr.utils.get_upload_folder())
    real = os.path.realpath(path)
    if real.startswith(folder + os.sep):
        try:
            os.remove(real)
        except OSError:
            pass


def behind_proxy() -> bool:
    """Whether the app was told a proxy stands in front of it (BLINK_BEHIND_PROXY=1; a Hugging Face
    Space, SPACE_ID set, always is): only then are a request's X-Forwarded-* headers believed."""
    return os.environ.get("BLINK_BEHIND_PROXY") == "1" or bool(os.environ.get("SPACE_ID"))


_HOST = re.compile(r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def page_url(headers, trust_forwarded: bool | None = None) -> str:
    """This page's address as the browser sees it, from a request's headers: its Host, or behind a
    proxy its X-Forwarded-Host and -Proto; "" for anything but an http(s) address of a plain host
    name, so no header can put another link or markup on the page."""
    if headers is None:
        return ""
    trust = behind_proxy() if trust_forwarded is None else trust_forwarded
    forwarded = (lambda name: (headers.get(name) or "").split(",")[0].strip()) if trust else (lambda name: "")
    host = forwarded("x-forwarded-host") or headers.get("host") or ""
    scheme = (forwarded("x-forwarded-proto") or "http").lower()
    if scheme not in ("http", "https") or not _HOST.fullmatch(host):
        return ""
    return f"{scheme}://{host}/"


# Images per second (per critic update) of the fast CPU model on a 2-core machine, for the estimate
# before any run here has measured its own (lab/README.md, "History: Speed and start-up").
CPU_FAST_IMAGES_PER_SECOND = 1350
# Seconds per step beyond which a run crawls: loss points, grids and Stop all feel slow.
CRAWL_SECONDS_PER_STEP = 1.0


def measured_images_per_second(runs_root: str, plan: Plan) -> float | None:
    """The newest speed measured on this server by a run of the same settings: device kind and
    processes, model, loss, resolution and batch (a batch-1 run's images a second say nothing of
    batch 128's, and made its estimate hours too long)."""
    from core.rundir import list_runs
    config = plan.config
    wanted = (plan.device.kind, plan.device.processes, config.preset, config.gan, config.batch_size)
    for run in list_runs(runs_root)[:20]:
        status = run.read_status()
        if ((status.device_kind, status.processes, status.preset, status.gan, status.batch_size) == wanted
                and status.images_per_second
                and plan.resolution in (None, status.resolution)):
            return status.images_per_second
    return None


def estimate_note(plan: Plan, runs_root: str) -> str:
    """Before Start: what will train (the run's plan), the time it will take here, and a warning
    when its settings will crawl."""
    return f"What will train: {plan.describe()}  \n{time_note(plan, runs_root)}"


def time_note(plan: Plan, runs_root: str) -> str:
    config, info = plan.config, plan.device
    preset, n_critic = config.preset, config.n_critic
    measured = measured_images_per_second(runs_root, plan)
    speed, source = measured, "as a run of these settings measured on this server"
    if measured is None and devices.is_cpu(info.kind) and preset == "fast":
        speed, source = (CPU_FAST_IMAGES_PER_SECOND / plan.gan.cpu_cost,
                         "rough: no run of these settings has trained here yet")
    turn = chunks.chunk_seconds(config.device) if chunks.on_zero_gpu() else None
    if turn and speed is None:
        return (f"On ZeroGPU a run trains in turns, one GPU call each with {turn:.0f} s of training on {info.name}: "
                "how many steps a turn trains is shown once a first turn has measured it.")
    if speed is None:
        return "Time estimate: shown once the run has measured its speed."
    per_step = config.batch_size * n_critic / speed   # the batch is global: split over the devices
    if turn:
        per_turn = turn / per_step
        return (f"On ZeroGPU: each {turn:.0f}-s turn of {info.name} trains about **{per_turn:,.0f} steps**, so "
                f"{config.steps:,} steps take about {math.ceil(config.steps / per_turn):,} turns ({source}).")
    note = (f"About **{views.duration(per_step * config.steps)}** for {config.steps:,} steps on this "
            f"{info.kind.upper()} if nothing else keeps it busy ({source}).")
    if per_step > CRAWL_SECONDS_PER_STEP:
        note += "  \n⚠️ " + crawl_warning(config, info, preset, n_critic, speed, per_step)
    return note


def crawl_warning(config: TrainConfig, info: devices.DeviceInfo, preset: str, n_critic: int, speed: float,
                  per_step: float) -> str:
    """Why these settings crawl, and changes that would not, worked out from the same speed: never
    a batch that crawls too (the walk saw a batch-128 run told to use batch 128)."""
    work = f" ({n_critic} critic updates of {config.batch_size} images each)" if n_critic > 1 else ""
    warning = f"About {per_step:.1f} s a step at batch {config.batch_size}{work}: the curves and grids will crawl."
    fixes = []
    # The largest power of two (less what does not split over the devices) under the crawl line.
    batch = 2 ** math.floor(math.log2(max(speed * CRAWL_SECONDS_PER_STEP / n_critic, 1)))
    batch -= batch % info.devices
    if batch and batch * n_critic / speed <= CRAWL_SECONDS_PER_STEP:
        fixes.append(f"batch {batch} (about {batch * n_critic / speed:.1f} s a step)")
    if n_critic > 1:
        quicker = [g.label for g in gans.GAN_TYPES if g.defaults.get("n_critic", 1) == 1]
        fixes.append(f"a GAN type with one critic update a step ({', '.join(quicker)})")
    if devices.is_cpu(info.kind) and preset != "fast":
        fixes.append("the fast model size")
    if not fixes:
        return warning
    return warning + " Learning shows much sooner with " + " or ".join(fixes) + "."


def whole_number_box(value, **options) -> gr.Number:
    """A number box for a whole-number field, passed on as typed: Gradio's precision=0 would round
    "2.5" to 2 before the server's check (core/config.py whole_number) could refuse it by name."""
    return gr.Number(value=value, precision=None, **options)


# What the host's Step (and 10 steps) trains: both nets as the run does, or one alone (the lesson's
# "let D learn alone and watch its verdicts move"): the page's words for core/rundir.py STEP_UPDATES.
STEP_TRAINS = dict(zip(("G and D", "D alone", "G alone"), STEP_UPDATES))


def _step_updates(step_trains) -> str:
    if step_trains not in STEP_TRAINS:
        raise refused(f"Step trains: choose one of {', '.join(STEP_TRAINS)}.", title="Check the settings")
    return STEP_TRAINS[step_trains]


# Wait after each wrong host key: slow enough that guessing gets nowhere, short for a typo.
WRONG_KEY_SECONDS = 0.5


class TrainTab:
    """The Train tab: the form, the host's controls, the live panel and the named API.

    The state every viewer shares (the job, the live feed, the device probes, the host key) is in
    attributes and the handlers are methods, so a server-side check can be called directly. The
    tab is laid out where it is made: in the page's open Tab, its load events the page's, or, made
    alone (a test's), in a Blocks of its own (sample_tab.tab_blocks)."""

    def __init__(self, job: Job, feed: LiveFeed, devices: DeviceCache, host_key: str = ""):
        self.job, self.feed, self.devices, self.host_key = job, feed, devices, host_key
        self.info = devices.get("auto")
        self.wrong_keys = threading.Lock()
        self._lay_out()

    # ---- handlers --------------------------------------------------------------------------
    def require_host(self, key) -> None:
        """Checked on the server: hiding the buttons would not stop a script.

        A right key passes at once, and so is no key refused: it guesses nothing, and a room of
        keyless presses must not hold the server's threads before the host's. Each wrong one waits
        WRONG_KEY_SECONDS, one at a time for the whole server, so guessing runs at two keys a second
        at most however many requests come."""
        if not self.is_host(key):
            raise refused("Only the host can start, stop, pause or resume runs, or change the generator everyone "
                          "samples from, on this page (enter the host key). Everyone else watches the run live.",
                          title="Watch mode")

    def is_host(self, key) -> bool:
        """Whether `key` is the host's (always, on a page with no host key); a wrong key waits its turn."""
        if not self.host_key or hmac.compare_digest(str(key or "").encode(), self.host_key.encode()):
            return True
        if not str(key or ""):
            return False
        with self.wrong_keys:
            time.sleep(WRONG_KEY_SECONDS)
        return False

    def planned_start(self, **form) -> Plan:
        """The plan Start makes of the form (plan_from_form), refused in the page's words."""
        try:
            return self.plan_from_form(**form)
        except ConfigError as exc:
            raise refused(in_page_words(str(exc)), title="Check the settings")
        except (TypeError, ValueError) as exc:
            raise refused(f"Invalid form value: {exc}", title="Check the settings")

    def plan_from_form(self, **form) -> Plan:
        """The plan Start makes of the form's values by field name (FORM_FIELDS; one left out keeps
        TrainConfig's default), which the estimate shows: ConfigError naming the field, TypeError or
        ValueError for a value of the wrong kind."""
        unknown = sorted(set(form) - set(FORM_FIELDS))
        if unknown:
            raise TypeError(f"not fields of the form: {', '.join(unknown)}")
        # A whole number is checked against its range and named by its label; a choice goes on as
        # text for validate to check; the path only for 'My images', through its guard.
        values: dict = {}
        for name in FORM_FIELDS:
            value = form.get(name, getattr(TrainConfig, name))
            if name == "data_path":
                values[name] = check_data_path(values["dataset"], value)
            else:
                values[name] = form_number(value, name) if spec(name)["range"] else str(value)
        config = TrainConfig(**values)
        # The only check before the plan's is the one its input needs: the probe would run for
        # any string. A probe is kept (DeviceCache), so this is the one probe of this Start.
        if config.device not in DEVICES:
            raise ConfigError(f"Device '{config.device}' is not supported; choose one of: {', '.join(DEVICES)}.")
        return plan_run(config, self.devices.get(config.device))

    def start(self, key="", **form):
        """Start a run of the form's settings, given by field name (FORM_FIELDS), for the host."""
        self.require_host(key)
        # Answered at once, before the settings are checked (a device probe can take seconds). A
        # trainer that has written its final status may take a moment to exit: job.start waits.
        if self.job.is_active() and self.job.snapshot().status.state not in FINAL_STATES:
            raise refused(self.job.busy_message(), title="A run is going")
        plan = self.planned_start(**form)
        self.refuse_anonymous_press(plan.asked.device)
        try:
            run = self.job.start(plan)   # the job's lock decides between two Starts pressed together
        except JobBusy as exc:
            raise refused(str(exc), title="A run is going")
        except DiskRefused as exc:
            raise refused(str(exc), title="Cannot start")
        return f"Started run `{run.name}`."

    def refresh_identity(self, key="") -> None:
        """The host's page, every IDENTITY_SECONDS on ZeroGPU: the run's next GPU calls carry this
        request's ZeroGPU identity, fresher than the last press's (an anonymous one changes nothing)."""
        self.require_host(key)
        if not chunks.anonymous_press():
            self.job.charge_to_presser()

    @staticmethod
    def refuse_anonymous_press(device: str) -> None:
        """On ZeroGPU, a press whose GPU calls would spend the network's shared quota is refused,
        before anything runs, saying whose quota it would have spent and where to press instead."""
        if chunks.spends_gpu_quota(device) and chunks.anonymous_press():
            raise refused(chunks.ANONYMOUS_PRESS, title="Whose quota")

    def estimate(self, **form) -> str:
        """Before Start: what the form's run will train (the plan Start makes, from every field), how
        long it takes here, and whether it will crawl; or why Start would refuse it."""
        try:
            plan = self.plan_from_form(**form)
        except (ConfigError, TypeError, ValueError) as exc:
            return f"What will train: nothing yet. {in_page_words(str(exc))}"
        return estimate_note(plan, self.job.runs_root)

    def stop(self, key=""):
        self.require_host(key)
        return self.job.request("stop")

    def step_one(self, key="", step_trains="G and D"):
        """While paused: exactly one generator update (with its critic updates), or one update of
        D or G alone."""
        self.require_host(key)
        return self.job.request("step", 1, _step_updates(step_trains))

    def step_ten(self, key="", step_trains="G and D"):
        """While paused: exactly ten generator updates (or of D or G alone)."""
        self.require_host(key)
        return self.job.request("step", 10, _step_updates(step_trains))

    def pause(self, key=""):
        self.require_host(key)
        return self.job.request("pause")

    def change_settings(self, lr_g=None, lr_d=None, beta1=None, beta2=None, n_critic=None, key=""):
        """While a run trains or is paused: the fields given (a blank one stays as it is) from the
        run's next step on, written to its events and marked on the charts."""
        self.require_host(key)
        given = dict(lr_g=lr_g, lr_d=lr_d, beta1=beta1, beta2=beta2, n_critic=n_critic)
        values = {}
        try:
            for name in LIVE_FIELDS:
                value = given[name]
                if value is None or str(value).strip() == "":
                    continue
                if spec(name)["range"]:
                    values[name] = form_number(value, name)
                else:
                    try:
                        values[name] = float(value)
                    except (TypeError, ValueError):
                        raise ConfigError(f"{name} must be a number (got {value!r}).")
            if not values:
                return "Nothing to change: type a new value in one of the boxes."
            return self.job.change_settings(values)
        except ConfigError as exc:
            raise refused(in_page_words(str(exc)), title="Check the settings")

    def compare_choices(self):
        """The "Compare with" picker's entries: the live run alone, then the earlier runs of its images."""
        choices = [("The live run alone", "")]
        for run in self.job.comparison.runs():
            status = run.read_status()
            choices.append((f"{run.name}: {status.gan or '?'}, step {status.step or 0:,}, {status.state or '?'}", run.name))
        shown = self.job.comparison.run
        return gr.Dropdown(choices=choices, value=shown.name if shown else "")

    def compare(self, run_name="", key=""):
        """Show an earlier run of the same images beside the live run, on every page ("": none)."""
        self.require_host(key)
        try:
            return self.job.comparison.show(str(run_name or ""))
        except ComparisonRefused as exc:
            raise refused(str(exc), title="Cannot compare")

    def start_comparison(self, change="lr_d", when="at once", key=""):
        """Run the live (or last) run again with one setting changed (COMPARISONS), beside it: now if
        nothing trains; while it trains, `when` "at once" (beside it, where the device takes two
        runs) or "after" it finishes."""
        self.require_host(key)
        run = self.job.run
        if run is None:
            raise refused("Start a run first: a comparison runs it again with one setting changed.",
                          title="Nothing to compare")
        try:
            config = comparison(run.read_plan(), change)
            plan = plan_run(config, self.devices.get(config.device))
            # `when` is one of COMPARISON_TIMES: the Radio refuses any other (patches.name_bad_values).
            return self.job.comparison.start(plan, run, COMPARISONS[change], at_once=when == "at once")
        except ConfigError as exc:
            raise refused(in_page_words(str(exc)), title="Check the settings")
        except ComparisonRefused as exc:
            raise refused(str(exc), title="A comparison is waiting")
        except JobBusy as exc:
            raise refused(str(exc), title="A run is going")
        except DiskRefused as exc:
            raise refused(str(exc), title="Cannot start")

    def resume(self, resume_steps=0, key=""):
        """Resume a paused live run, or continue a stopped/finished/failed run from its checkpoint."""
        self.require_host(key)
        if self.job.run is not None:
            self.refuse_anonymous_press(self.job.run.read_config().device)
        state = self.job.snapshot().status.state
        if self.job.is_active() and state not in FINAL_STATES:
            if state == "paused" or self.job.pending_request() == "pause":   # a Pause not yet heard: cancelled
                return self.job.request("resume")
            return "The run is training already (Resume continues a paused or stopped run)."
        try:
            steps = whole_number(resume_steps or 0, "Resume to step", 0, spec("steps")["range"][1])
            run, note = self.job.resume(self.devices.get, steps or None)
        except (ConfigError, ResumeRefused) as exc:
            raise refused(str(exc), title="Cannot resume")
        except JobBusy as exc:
            raise refused(str(exc), title="A run is going")
        return f"Resuming run `{run.name}` from its checkpoint." + (f" {note}" if note else "")

    def check_upload(self, path, key="") -> dict:
        """Check an uploaded zip on the server (size, entries, images) and train from it. Only the
        host's uploads may make room by evicting older ones: anyone else's must fit."""
        if not path:
            return gr.skip()   # the upload was cleared: nothing to check, nothing changes
        try:
            host = self.is_host(key)   # the host's check has a lane of its own (viewer_work.run_for_host)
            result = (viewer_work.run_for_host if host else viewer_work.run)(dataset_work.check_upload, path, host)
        finally:
            _forget_upload(path)
        if "refused" in result:
            # Said in the dataset note and left there: raising would mark every output of this
            # event (the Dataset dropdown, the folder box) as an error until each is dismissed.
            log_refusal("Upload refused", result["refused"])
            return {self.dataset_note: f"⚠️ Upload refused: {result['refused']}"}
        return {self.dataset: "folder", self.data_path: result["path"], self.dataset_note: result["message"]}

    def preview_dataset(self, dataset, data_path):
        """What the chosen dataset holds, and a grid of its real images, before training."""
        return viewer_work.run(dataset_work.preview, dataset, data_path)

    def status_api(self) -> dict:
        """The run as plain JSON for scripts: status, event count, newest event and grid."""
        snap = self.job.snapshot()
        return views.json_safe({"run": snap.run_name, **snap.status.to_dict(), "events": len(snap.events),
                                "last_event": snap.events[-1] if snap.events else None, "grid": live_grid_url(snap),
                                "host_key_required": bool(self.host_key),
                                "compare": self.job.comparison.run.name if self.job.comparison.run else None,
                                "compare_note": self.job.comparison.note})

    def settings_on_open(self):
        """A page opened (or reloaded) during a run presents the run, not the form."""
        return gr.Accordion(open=not self.job.is_active())

    def load_setup(self, request: gr.Request) -> dict:
        """Preset the form from the URL (?dataset=...&steps=...); invalid values are ignored, visibly."""
        params = dict(request.query_params) if request is not None else {}
        values, notes = setup_from_query(params)
        fields = dict(zip(QUERY_FIELDS, self.query_form))
        note = ("Setup from the link: " + ", ".join(f"{k}={v}" for k, v in values.items()) if values else "")
        if notes:
            note += ("  \n" if note else "") + "⚠️ " + "  \n⚠️ ".join(notes)
        return {**{fields[name]: value for name, value in values.items()}, self.setup_note: note}

    def share_link(self, dataset, gan, preset, batch_size, precision, steps, device, request: gr.Request) -> str:
        query = share_query(dataset, gan, preset, batch_size, precision, steps, device)
        url = f"{page_url(request.headers if request is not None else None)}?{query}"
        return f"**Share this setup:** [{url}]({url})"

    def join_link(self, request: gr.Request) -> str:
        """The students' link (?view=watch) and its QR code, for the host's page."""
        return views.join_html(page_url(request.headers if request is not None else None))

    # ---- layout and events -------------------------------------------------------------------
    def _lay_out(self) -> None:
        with sample_tab.tab_blocks() as blocks:
            with gr.Column(elem_classes=["blink-host-only"]):   # hidden in the student view
                self._lay_out_main_choices()
            # The host's controls right under the main choices, so that before the first run the
            # choices and Start fit a 1280x720 projector; above the live panel once a run is
            # presented (PAGE_CSS).
            with gr.Row(elem_id="blink-controls", elem_classes=["blink-host-only"], equal_height=True):
                self.key = gr.Textbox(label="Host key", type="password", value="", visible=bool(self.host_key),
                                      placeholder="only the host needs this", scale=2)
                self.start_button = gr.Button("Start", variant="primary", elem_id="blink-start")
                self.pause_button = gr.Button("Pause", elem_id="blink-pause")
                self.resume_button = gr.Button("Resume", elem_id="blink-resume")
                # While paused: one generator update (or ten) at a time, the grid before and after.
                self.step_button = gr.Button("Step", elem_id="blink-step")
                self.step_ten_button = gr.Button("10 steps", elem_id="blink-step-10")
                self.stop_button = gr.Button("Stop", variant="stop", elem_id="blink-stop")
            self.message = gr.Markdown(elem_id="blink-message", elem_classes=["blink-host-only"])
            # On ZeroGPU, the host's page hands the run a fresh identity while it is open (a press's
            # expires within minutes, and each chunk's GPU call spends it): ticking on the host's page alone.
            self.identity_timer = gr.Timer(chunks.IDENTITY_SECONDS, active=False) if chunks.on_zero_gpu() else None
            # Changed while the run trains or is paused, from its next step: the lesson's "what if D
            # learned ten times faster?" without a new run. Text boxes, as a blank one must mean "as
            # it is" (an empty number box is sent as 0); the values are checked as numbers on the server.
            with gr.Accordion("Change while training", open=False, elem_id="blink-live-settings",
                              elem_classes=["blink-host-only"]):
                gr.Markdown("From the next step, marked on the charts, kept when the run is resumed. On a TPU "
                            "the first change, and any change of a beta or of D's updates, compiles the step "
                            "again (seconds to minutes); later changes of the learning rates do not.",
                            elem_id="live-settings-note")
                self.step_trains = gr.Radio(list(STEP_TRAINS), value="G and D", label="Step trains",
                                            elem_id="live-step-trains")
                with gr.Row():
                    self.live_settings = [gr.Textbox(label=label, placeholder="as it is", elem_id=f"live-{name}")
                                          for name, label in views.LIVE_LABELS.items()]
                self.change_button = gr.Button("Apply from the next step", elem_id="blink-change")
            # Runs side by side: an earlier run's grid beside the live one and its curves dashed on the
            # same charts, for every page; or the seed's experiments, a run again with one change.
            with gr.Accordion("Compare runs", open=False, elem_id="blink-compare",
                              elem_classes=["blink-host-only"]) as self.compare_box:
                with gr.Row():
                    # Its choices are the runs when it was opened: a name is checked by the job, not the list.
                    self.compare_with = gr.Dropdown([("The live run alone", "")], value="", label="Compare with",
                                                    allow_custom_value=True,
                                                    info="an earlier run of the same images, beside the live one")
                    self.compare_button = gr.Button("Show side by side", elem_id="blink-compare-show")
                with gr.Row():
                    self.comparison = gr.Dropdown([(words, name) for name, words in COMPARISONS.items()],
                                                  value="lr_d", label="Run it again with",
                                                  info="the same seed and length")
                    self.comparison_when = gr.Radio([(words, name) for name, words in COMPARISON_TIMES.items()],
                                                    value="at once", label="When",
                                                    info="while the live run trains: a CPU gives each run half "
                                                         "its cores; a TPU trains one run at a time")
                    self.comparison_button = gr.Button("Start the comparison", elem_id="blink-compare-start")
            with gr.Column(elem_id="blink-more", elem_classes=["blink-host-only"]):
                self.estimate_text = gr.Markdown(elem_id="estimate")
                self._lay_out_more_choices()
                self.share = gr.Markdown(elem_id="share-link")
                self.resume_steps = whole_number_box(value=0, label="Resume to step (0: the run's own length)")
            # The students' link and QR code: at the top of the live panel, where a room can scan it.
            self.join = gr.HTML(elem_id="join-link", elem_classes=["blink-host-only"])
            self.live = gr.HTML(LIVE_PANEL, js_on_load=_static("live.js"), css_template=_static("live.css"),
                                elem_id="live", apply_default_css=False)
            self._wire_events(blocks)

    def _lay_out_main_choices(self) -> None:
        """The main choices, folded once a run starts: the run, not the form, is what the room watches."""
        with gr.Accordion("Settings", open=True, elem_id="blink-settings") as self.settings:
            self.setup_note = gr.Markdown(elem_id="setup-note")
            with gr.Row():
                self.dataset = gr.Dropdown([(source.label, source.key) for source in data.SOURCES.values()],
                                           value=TrainConfig.dataset, label=spec("dataset")["label"])
                self.data_path = gr.Textbox(label=spec("data_path")["label"], value=TrainConfig.data_path)
                self.gan = gr.Dropdown([(AUTO_GAN_LABEL, "auto")] + [(g.label, g.name) for g in gans.GAN_TYPES],
                                       value=TrainConfig.gan,
                                       label=spec("gan")["label"])
                self.preset = gr.Dropdown(list(PRESETS), value=TrainConfig.preset, label=spec("preset")["label"],
                                          info="auto: a larger network at 64x64 pixels on a TPU or GPU, a small fast one on a CPU (the images' own size, at most 32x32)")
            with gr.Row():
                # 0 as the processes' box has it: Gradio shows and sends an empty number box as 0.
                self.batch_size = whole_number_box(value=0, label=spec("batch_size")["label"],
                                                   info=batch_size_note(self.info))
                self.precision = gr.Radio(precision_choices(self.info), value=devices.default_precision(self.info.kind),
                                          label=spec("precision")["label"],
                                          info="how many bits each number has: fp32 is full precision; bf16 and fp16 are half, about twice as fast on a TPU or GPU")
                self.device = gr.Dropdown(list(DEVICES), value=TrainConfig.device, label=spec("device")["label"])
                self.steps = whole_number_box(value=TrainConfig.steps, label=spec("steps")["label"])

    def _lay_out_more_choices(self) -> None:
        """What the main choices mean on this device, own images, and the advanced settings: below Start."""
        gr.Markdown(precision_notes(self.info), elem_id="precision-notes")
        with gr.Accordion("Dataset: upload your images, preview real ones", open=False):
            with gr.Row():
                self.upload = gr.File(label="Zip of PNG/JPEG images", file_types=[".zip"], type="filepath")
                with gr.Column():
                    self.dataset_note = gr.Markdown(elem_id="dataset-note")
                    self.dataset_preview = gr.Image(label="Real images from the dataset", format="png",
                                                    type="numpy", interactive=False, elem_id="dataset-preview")
        with gr.Accordion("Advanced: labels; augmentation; how often to log, draw a grid and save; seed; processes",
                          open=False):
            self.conditional = gr.Radio(
                [("Use the dataset's labels (class-conditional: ask for a digit)", "auto"),
                 ("Ignore labels (unconditional)", "off")], value=TrainConfig.conditional,
                label=spec("conditional")["label"], info="Datasets with classes (MNIST, Fashion-MNIST, CIFAR-10) train a "
                                     "class-conditional GAN by default: digits appear in about half the steps")
            self.augment = gr.Radio(
                [(f"Auto: on under {AUGMENT_BELOW:,} images (a class, when the set has classes)", "auto"),
                 ("On", "on"), ("Off", "off")],
                value=TrainConfig.augment, label=spec("augment")["label"],
                info="D sees images, real and fake, randomly shifted, recoloured and with a square cut out, more "
                     "often as it starts to learn the set by heart (DiffAugment, ADA), so a small set is not memorised")
            with gr.Row():
                self.log_every = whole_number_box(value=TrainConfig.log_every, label=spec("log_every")["label"],
                                                  info="loss points and status updates (Stop and Pause are heard within a second)")
                self.grid_every = whole_number_box(value=TrainConfig.grid_every, label=spec("grid_every")["label"])
                self.checkpoint_every = whole_number_box(value=TrainConfig.checkpoint_every,
                                                         label=spec("checkpoint_every")["label"])
                self.seed = whole_number_box(value=TrainConfig.seed, label=spec("seed")["label"],
                                             info="the same seed and settings start the same run; another seed, another run")
                self.processes = whole_number_box(value=TrainConfig.processes, label=spec("processes")["label"],
                                                  info="0: one per GPU of this machine, each with its share of the "
                                                       "batch (DDP); on a CPU one, unless you ask for more")
        self.form = {name: getattr(self, name) for name in FORM_FIELDS}   # each field's component
        self.query_form = [self.form[name] for name in QUERY_FIELDS]

    def _wire_events(self, blocks: gr.Blocks) -> None:
        # In the browser only: the last message goes at once, so a refusal is not shown beside it.
        self.start_button.click(None, None, self.message, js="() => ''", api_visibility="private")
        # By name: the API's parameters are the form's fields in FORM_FIELDS order, then the key.
        self.start_button.click(self.start, inputs_kwargs={**self.form, "key": self.key}, outputs=self.message,
                                api_name="start").success(
            lambda: gr.Accordion(open=False), None, self.settings, api_visibility="private", show_progress="hidden")
        blocks.load(self.settings_on_open, None, self.settings, api_visibility="private", show_progress="hidden")
        # From every field, as Start plans; a typed path counts once submitted (as for the dataset's
        # note), not at each keystroke.
        triggers = [blocks.load, self.data_path.submit] + [c.change for n, c in self.form.items() if n != "data_path"]
        # always_last: a slow estimate (a dataset's first look can probe the network) never lands
        # after the one for the settings changed since.
        gr.on(triggers, self.estimate, inputs_kwargs=dict(self.form), outputs=self.estimate_text,
              trigger_mode="always_last", api_visibility="private", show_progress="hidden")
        # The live panel says "stopping..." / "pausing..." on the click (live.js); refused, it says the run's status again.
        status_again = "() => document.querySelector('#live .live').dispatchEvent(new Event('blink-refused'))"
        # The host's uploads have a share of the bound of their own (app/serving.py UploadLimits): the
        # page says it is the host's by a cookie holding the key, sent with each upload.
        self.key.change(None, self.key, None, js=f"(key) => {{ document.cookie = '{serving.HOST_COOKIE}=' + "
                        "encodeURIComponent(key) + '; path=/; SameSite=Strict'; }", api_visibility="private",
                        show_progress="hidden")
        if self.identity_timer is not None:
            ticks = lambda key: gr.Timer(active=self.is_host(key))   # noqa: E731  (a page with the host key, or no key set)
            gr.on([blocks.load, self.key.change], ticks, self.key, self.identity_timer, api_visibility="private",
                  show_progress="hidden")
            self.identity_timer.tick(self.refresh_identity, self.key, None, api_name="refresh_identity",
                                     concurrency_limit=None, show_progress="hidden")
        self.stop_button.click(self.stop, self.key, self.message, api_name="stop", concurrency_limit=None).failure(
            None, None, None, js=status_again, api_visibility="private")
        self.pause_button.click(self.pause, self.key, self.message, api_name="pause", concurrency_limit=None).failure(
            None, None, None, js=status_again, api_visibility="private")
        self.step_button.click(self.step_one, [self.key, self.step_trains], self.message, api_name="step",
                               concurrency_limit=None)
        self.step_ten_button.click(self.step_ten, [self.key, self.step_trains], self.message, api_name="step_10",
                                   concurrency_limit=None)
        self.resume_button.click(self.resume, [self.resume_steps, self.key], self.message, api_name="resume")
        self.change_button.click(self.change_settings, [*self.live_settings, self.key], self.message,
                                 api_name="change_settings", concurrency_limit=None)
        self.compare_box.expand(self.compare_choices, None, self.compare_with, api_visibility="private",
                                show_progress="hidden")
        self.compare_button.click(self.compare, [self.compare_with, self.key], self.message, api_name="compare",
                                  concurrency_limit=None)
        self.comparison_button.click(self.start_comparison, [self.comparison, self.comparison_when, self.key],
                                     self.message, api_name="start_comparison")
        blocks.load(self.join_link, None, self.join, api_visibility="private")
        gr.api(self.status_api, api_name="status", concurrency_limit=None)
        self.upload.upload(self.check_upload, [self.upload, self.key], [self.dataset, self.data_path, self.dataset_note],
                           api_name="upload_dataset")
        gr.on([self.dataset.change, self.data_path.submit, blocks.load], self.preview_dataset,
              [self.dataset, self.data_path], [self.dataset_note, self.dataset_preview], api_name="preview_dataset",
              show_progress="hidden")
        blocks.load(self.load_setup, None, self.query_form + [self.setup_note], api_visibility="private").then(
            self.share_link, self.query_form, self.share, api_visibility="private")
        gr.on([c.change for c in self.query_form], self.share_link, self.query_form, self.share,
              api_visibility="private", concurrency_limit=None, show_progress="hidden")


def build_app(job: Job | None = None, device_cache: DeviceCache | None = None,
              host_key: str | None = None) -> gr.Blocks:
    job = job or Job()
    feed = LiveFeed(job)      # one watcher of the run for every viewer (app/live.py)
    host_key = host_key if host_key is not None else os.environ.get("BLINK_HOST_KEY", "")
    device_cache = device_cache or DeviceCache()
    info = device_cache.get("auto")

    with gr.Blocks(title="Blink: watch a GAN learn", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(elem_classes=["blink-host-only", "blink-intro"], value="# Blink\nPick a dataset, press **Start**, and watch a GAN learn. "
                    f"Device: **{info.name}**" + (f" — {info.notice}" if info.notice else "") +
                    ("\n\nOne run at a time: everyone who opens this page watches it live."
                     + (" Only the host (with the host key) can start or stop it." if host_key else "")))
        with gr.Tabs(selected="train") as tabs:
            with gr.Tab("Train", id="train"):
                train = TrainTab(job, feed, device_cache, host_key)
            with gr.Tab("Sample", id="sample") as sample_page:
                sampler = sample_tab.SampleTab(job.generator_dir, run_dir=lambda: job.run.path if job.run else None,
                                               runs=job.runs_with_generators, require_host=train.require_host,
                                               host_key_set=bool(host_key))

        live = train.live
        # The live panel saw the run it watched finish (not stopped): to the Sample tab (refreshed by show_on).
        live.click(lambda: gr.Tabs(selected="sample"), None, tabs, api_visibility="private", show_progress="hidden")
        # The Sample tab is alive the moment the page opens, and shows the newest generators (the
        # live run's checkpoint, new runs to pick) whenever it is opened and when a run ends.
        sampler.show_on([demo.load, sample_page.select, live.click])
    name_bad_values(demo)
    demo.blink_job = job    # tests and app.py reach the job through the app
    demo.blink_feed = feed    # app.py mounts its routes (/live/...) when it launches
    return demo
