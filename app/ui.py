"""The Blink page: the Train tab (form, host controls, live panel, named API) and the Sample tab.

One person (the host) trains, everyone who opens the page watches the same run. With a host
key (BLINK_HOST_KEY or `python app.py --host-key KEY`), the host's presses need the key, checked
here on the server; without one, anyone may press them.

Nothing on the page polls: the live panel (status, curves, grid) is pushed to every viewer by one
watcher of the run (app/live.py), so a viewer costs the server work only when the trainer writes.
`?view=watch` is the student's view: the live run without the form, laid out for a phone.
"""
from __future__ import annotations

import hmac
import os
import re
import threading
import time
from contextlib import contextmanager, suppress

import gradio as gr

from app import chunks, dataset_work, forkserver, sample_tab, serving, viewer_work, views
from app.compare import ComparisonRefused
from app.dataset_work import check_data_path
from app.errors import REFUSAL_TOAST_CSS, log_refusal, refused
from app.job import Job, JobBusy, ResumeRefused
from app.live import LiveFeed, live_grid_url
from app.patches import name_bad_values
from app.train_form import (FORM_FIELDS, QUERY_FIELDS, STEP_TRAINS, in_page_words, lay_out_comparisons,
                            lay_out_live_settings, lay_out_main_choices, lay_out_more_choices, setup_from_query,
                            share_query, time_note, whole_number_box)
from core import devices
from core.config import COMPARISONS, DEVICES, LIVE_FIELDS, ConfigError, TrainConfig, comparison, form_number, spec, \
    whole_number
from core.plan import Plan, plan_run
from core.rundir import FINAL_STATES, DiskRefused

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

# Wait after each wrong host key: slow enough that guessing gets nowhere, short for a typo.
WRONG_KEY_SECONDS = 0.5
# Events the page fires for itself: no named endpoint, no progress shown.
QUIET = dict(api_visibility="private", show_progress="hidden")



def _static(name: str) -> str:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "static", name)) as f:
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


@contextmanager
def refusals(*titled: tuple[type | tuple[type, ...], str], config_words=in_page_words):
    """Each exception of a (kinds, title) pair raised as a refusal headed by its title (the first pair
    that fits); a ConfigError's message in the page's words."""
    try:
        yield
    except tuple(kind for kind, _ in titled) as exc:
        title = next(title for kind, title in titled if isinstance(exc, kind))
        raise refused(config_words(str(exc)) if isinstance(exc, ConfigError) else str(exc), title=title)


SETTINGS_REFUSED = (ConfigError, "Check the settings")
BUSY = (JobBusy, "A run is going")
NO_DISK = (DiskRefused, "Cannot start")


def _number(value, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number (got {value!r}).")


def _forget_upload(path: str) -> None:
    """Remove Gradio's copy of an uploaded file once it is checked: kept (copied into the dataset
    cache, whose size is capped) or refused, it is not needed. Only a file in the upload folder."""
    folder = os.path.realpath(gr.utils.get_upload_folder())
    real = os.path.realpath(path)
    if real.startswith(folder + os.sep):
        with suppress(OSError):
            os.remove(real)


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


class TrainTab:
    """The Train tab: the form, the host's controls, the live panel and the named API, whose handlers
    are methods (a server-side check can be called directly). Laid out where it is made: in the page's
    open Tab, or, made alone (a test's), in a Blocks of its own (sample_tab.tab_blocks)."""

    def __init__(self, job: Job, feed: LiveFeed, devices: DeviceCache, host_key: str = ""):
        self.job, self.feed, self.devices, self.host_key = job, feed, devices, host_key
        self.info = devices.get("auto")
        self.wrong_keys = threading.Lock()
        self._lay_out()

    def require_host(self, key) -> None:
        """Checked on the server: hiding the buttons would not stop a script."""
        if not self.is_host(key):
            raise refused("Only the host can start, stop, pause or resume runs, or change the generator everyone "
                          "samples from, on this page (enter the host key). Everyone else watches the run live.",
                          title="Watch mode")

    def is_host(self, key) -> bool:
        """Whether `key` is the host's (always, on a page with no host key). A right key passes at once, and
        so is no key refused: it guesses nothing, and a room of keyless presses must not hold the server's
        threads. Each wrong one waits WRONG_KEY_SECONDS, one at a time for the whole server, so guessing
        runs at two keys a second at most however many requests come."""
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
        """The plan of the form's values by field name (one left out: TrainConfig's default), or
        ConfigError naming the field, TypeError or ValueError for a value of the wrong kind."""
        unknown = sorted(set(form) - set(FORM_FIELDS))
        if unknown:
            raise TypeError(f"not fields of the form: {', '.join(unknown)}")
        given = {name: form.get(name, getattr(TrainConfig, name)) for name in FORM_FIELDS}
        # The path first, only for 'My images', through its guard; a whole number is checked against its
        # range and named by its label; a choice goes on as text for validate to check.
        values = {"data_path": check_data_path(str(given["dataset"]), given.pop("data_path"))}
        values.update({name: form_number(v, name) if spec(name)["range"] else str(v) for name, v in given.items()})
        config = TrainConfig(**values)
        # The only check before the plan's is the one its input needs: the probe would run for
        # any string. A probe is kept (DeviceCache), so this is the one probe of this Start.
        if config.device not in DEVICES:
            raise ConfigError(f"Device '{config.device}' is not supported; choose one of: {', '.join(DEVICES)}.")
        return plan_run(config, self.devices.get(config.device))

    def start(self, key="", **form):
        """Start a run of the form's settings, given by field name (FORM_FIELDS)."""
        self.require_host(key)
        # Answered at once, before the settings are checked (a device probe can take seconds). A
        # trainer that has written its final status may take a moment to exit: job.start waits.
        if self.job.is_active() and self.job.snapshot().status.state not in FINAL_STATES:
            raise refused(self.job.busy_message(), title="A run is going")
        plan = self.planned_start(**form)
        self.refuse_anonymous_press(plan.asked.device)
        with refusals(BUSY, NO_DISK):
            run = self.job.start(plan)   # the job's lock decides between two Starts pressed together
        return f"Started run `{run.name}`."

    def refresh_identity(self, key="") -> None:
        """The host's page, every IDENTITY_SECONDS on ZeroGPU: the run's next GPU calls carry this
        request's ZeroGPU identity, fresher than the last press's (an anonymous one changes nothing)."""
        self.require_host(key)
        if not chunks.anonymous_press():
            self.job.charge_to_presser()

    @staticmethod
    def refuse_anonymous_press(device: str) -> None:
        """On ZeroGPU, a press whose GPU calls would spend the network's shared quota is refused
        before anything runs, saying whose quota it would have spent and where to press instead."""
        if chunks.spends_gpu_quota(device) and chunks.anonymous_press():
            raise refused(chunks.ANONYMOUS_PRESS, title="Whose quota")

    def estimate(self, **form) -> str:
        """Before Start: what the form's run will train (Start's plan) and how long, or why Start refuses it."""
        try:
            plan = self.plan_from_form(**form)
        except (ConfigError, TypeError, ValueError) as exc:
            return f"What will train: nothing yet. {in_page_words(str(exc))}"
        return f"What will train: {plan.describe()}  \n{time_note(plan, self.job.runs_root)}"

    def stop(self, key=""):
        self.require_host(key)
        return self.job.request("stop")

    def pause(self, key=""):
        self.require_host(key)
        return self.job.request("pause")

    def step_one(self, key="", step_trains="G and D"):
        """While paused: exactly one generator update (with its critic updates), or one of D or G alone."""
        return self._step(key, step_trains, 1)

    def step_ten(self, key="", step_trains="G and D"):
        return self._step(key, step_trains, 10)

    def _step(self, key, step_trains, count: int):
        self.require_host(key)
        if step_trains not in STEP_TRAINS:
            raise refused(f"Step trains: choose one of {', '.join(STEP_TRAINS)}.", title="Check the settings")
        return self.job.request("step", count, STEP_TRAINS[step_trains])

    def change_settings(self, lr_g=None, lr_d=None, beta1=None, beta2=None, n_critic=None, key=""):
        """While a run trains or is paused: the fields given (a blank one stays as it is) from its next step."""
        self.require_host(key)
        given = dict(zip(LIVE_FIELDS, (lr_g, lr_d, beta1, beta2, n_critic)))
        with refusals(SETTINGS_REFUSED):
            values = {name: form_number(value, name) if spec(name)["range"] else _number(value, name)
                      for name, value in given.items() if value is not None and str(value).strip() != ""}
            if not values:
                return "Nothing to change: type a new value in one of the boxes."
            return self.job.change_settings(values)

    def compare_choices(self):
        choices = [("The live run alone", "")]
        for run in self.job.comparison.runs():
            status = run.read_status()
            choices.append((f"{run.name}: {status.gan or '?'}, step {status.step or 0:,}, {status.state or '?'}", run.name))
        shown = self.job.comparison.run
        return gr.Dropdown(choices=choices, value=shown.name if shown else "")

    def compare(self, run_name="", key=""):
        """Show an earlier run of the same images beside the live run, on every page ("": none)."""
        self.require_host(key)
        with refusals((ComparisonRefused, "Cannot compare")):
            return self.job.comparison.show(str(run_name or ""))

    def start_comparison(self, change="lr_d", when="at once", key=""):
        """Run the live (or last) run again with one setting changed (COMPARISONS): now if nothing trains,
        else `when` "at once" (beside it, where the device takes two runs) or "after" it finishes."""
        self.require_host(key)
        run = self.job.run
        if run is None:
            raise refused("Start a run first: a comparison runs it again with one setting changed.",
                          title="Nothing to compare")
        with refusals(SETTINGS_REFUSED, (ComparisonRefused, "A comparison is waiting"), BUSY, NO_DISK):
            config = comparison(run.read_plan(), change)
            plan = plan_run(config, self.devices.get(config.device))
            # `when` is one of COMPARISON_TIMES: the Radio refuses any other (patches.name_bad_values).
            return self.job.comparison.start(plan, run, COMPARISONS[change], at_once=when == "at once")

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
        with refusals(((ConfigError, ResumeRefused), "Cannot resume"), BUSY, config_words=str):
            steps = whole_number(resume_steps or 0, "Resume to step", 0, spec("steps")["range"][1])
            run, note = self.job.resume(self.devices.get, steps or None)
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

    def settings_on_open(self):   # a page opened (or reloaded) during a run presents the run, not the form
        return gr.Accordion(open=not self.job.is_active())

    def load_setup(self, request: gr.Request) -> dict:
        """Preset the form from the URL (?dataset=...&steps=...); invalid values are ignored, visibly."""
        values, notes = setup_from_query(dict(request.query_params) if request is not None else {})
        note = ("Setup from the link: " + ", ".join(f"{k}={v}" for k, v in values.items()) if values else "")
        if notes:
            note += ("  \n" if note else "") + "⚠️ " + "  \n⚠️ ".join(notes)
        return {**{self.form[name]: value for name, value in values.items()}, self.setup_note: note}

    def share_link(self, dataset, gan, preset, batch_size, precision, steps, device, request: gr.Request) -> str:
        query = share_query(dataset, gan, preset, batch_size, precision, steps, device)
        url = f"{page_url(getattr(request, 'headers', None))}?{query}"
        return f"**Share this setup:** [{url}]({url})"

    def join_link(self, request: gr.Request) -> str:   # the students' link (?view=watch) and its QR code
        return views.join_html(page_url(getattr(request, "headers", None)))

    # ---- layout and events -------------------------------------------------------------------
    def _lay_out(self) -> None:
        with sample_tab.tab_blocks() as blocks:
            with gr.Column(elem_classes=["blink-host-only"]):   # hidden in the student view
                vars(self).update(lay_out_main_choices(self.info))
            # The host's controls right under the main choices, so that before the first run the choices
            # and Start fit a 1280x720 projector; above the live panel once a run is presented (PAGE_CSS).
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
            vars(self).update(lay_out_live_settings())
            vars(self).update(lay_out_comparisons())
            with gr.Column(elem_id="blink-more", elem_classes=["blink-host-only"]):
                self.estimate_text = gr.Markdown(elem_id="estimate")
                vars(self).update(lay_out_more_choices(self.info))
                self.share = gr.Markdown(elem_id="share-link")
                self.resume_steps = whole_number_box(value=0, label="Resume to step (0: the run's own length)")
            self.form = {name: getattr(self, name) for name in FORM_FIELDS}   # each field's component
            self.query_form = [self.form[name] for name in QUERY_FIELDS]
            # The students' link and QR code: at the top of the live panel, where a room can scan it.
            self.join = gr.HTML(elem_id="join-link", elem_classes=["blink-host-only"])
            # The live panel's markup (app/static/live.html) is filled by live.js from /live/events.
            self.live = gr.HTML(_static("live.html").replace("PRIMER", views.gan_primer_html()),
                                js_on_load=_static("live.js"), css_template=_static("live.css"),
                                elem_id="live", apply_default_css=False)
            self._wire_form(blocks)
            self._wire_host_controls(blocks)

    def _wire_form(self, blocks: gr.Blocks) -> None:
        # In the browser only: the last message goes at once, so a refusal is not shown beside it.
        self.start_button.click(None, None, self.message, js="() => ''", api_visibility="private")
        # By name: the API's parameters are the form's fields in FORM_FIELDS order, then the key.
        self.start_button.click(self.start, inputs_kwargs={**self.form, "key": self.key}, outputs=self.message,
                                api_name="start").success(lambda: gr.Accordion(open=False), None, self.settings, **QUIET)
        blocks.load(self.settings_on_open, None, self.settings, **QUIET)
        # From every field, as Start plans; a typed path counts once submitted (as for the dataset's
        # note), not at each keystroke. always_last: a slow estimate (a dataset's first look can
        # probe the network) never lands after the one for the settings changed since.
        triggers = [blocks.load, self.data_path.submit] + [c.change for n, c in self.form.items() if n != "data_path"]
        gr.on(triggers, self.estimate, inputs_kwargs=dict(self.form), outputs=self.estimate_text,
              trigger_mode="always_last", **QUIET)
        self.upload.upload(self.check_upload, [self.upload, self.key], [self.dataset, self.data_path, self.dataset_note],
                           api_name="upload_dataset")
        gr.on([self.dataset.change, self.data_path.submit, blocks.load], self.preview_dataset,
              [self.dataset, self.data_path], [self.dataset_note, self.dataset_preview], api_name="preview_dataset",
              show_progress="hidden")
        blocks.load(self.load_setup, None, self.query_form + [self.setup_note], api_visibility="private").then(
            self.share_link, self.query_form, self.share, api_visibility="private")
        gr.on([c.change for c in self.query_form], self.share_link, self.query_form, self.share,
              concurrency_limit=None, **QUIET)

    def _wire_host_controls(self, blocks: gr.Blocks) -> None:
        # The host's uploads have a share of the bound of their own (app/serving.py UploadLimits): the
        # page says it is the host's by a cookie holding the key, sent with each upload.
        self.key.change(None, self.key, None, js=f"(key) => {{ document.cookie = '{serving.HOST_COOKIE}=' + "
                        "encodeURIComponent(key) + '; path=/; SameSite=Strict'; }", **QUIET)
        if self.identity_timer is not None:
            ticks = lambda key: gr.Timer(active=self.is_host(key))   # noqa: E731  (a page with the host key, or no key set)
            gr.on([blocks.load, self.key.change], ticks, self.key, self.identity_timer, **QUIET)
            self.identity_timer.tick(self.refresh_identity, self.key, None, api_name="refresh_identity",
                                     concurrency_limit=None, show_progress="hidden")
        # The live panel says "stopping..." / "pausing..." on the click (live.js); refused, it says the run's status again.
        status_again = "() => document.querySelector('#live .live').dispatchEvent(new Event('blink-refused'))"
        # Each press a named endpoint answered in the message line; all but the two that start a
        # trainer (Resume, Start the comparison: the queue's default, a few at a time) at once.
        for button, api_name, handler, inputs in (
                (self.stop_button, "stop", self.stop, [self.key]),
                (self.pause_button, "pause", self.pause, [self.key]),
                (self.step_button, "step", self.step_one, [self.key, self.step_trains]),
                (self.step_ten_button, "step_10", self.step_ten, [self.key, self.step_trains]),
                (self.resume_button, "resume", self.resume, [self.resume_steps, self.key]),
                (self.change_button, "change_settings", self.change_settings, [*self.live_settings, self.key]),
                (self.compare_button, "compare", self.compare, [self.compare_with, self.key]),
                (self.comparison_button, "start_comparison", self.start_comparison,
                 [self.comparison, self.comparison_when, self.key])):
            pressed = button.click(handler, inputs, self.message, api_name=api_name, concurrency_limit=(
                "default" if api_name in ("resume", "start_comparison") else None))
            if api_name in ("stop", "pause"):
                pressed.failure(None, None, None, js=status_again, api_visibility="private")
        self.compare_box.expand(self.compare_choices, None, self.compare_with, **QUIET)
        blocks.load(self.join_link, None, self.join, api_visibility="private")
        gr.api(self.status_api, api_name="status", concurrency_limit=None)


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
