"""The Sample tab: explore a trained generator without training.

Seeds -> grid; two seeds -> interpolation strip and GIF; GANSpace directions and truncation
on one image; its nearest training images; the run's fixed-noise timelapse; downloads (the
generator, a zip of samples) and an upload of a generator pair.

`SampleTab` holds what every viewer of this server shares (the upload override, the returned
files) and has one method per event. A handler checks its inputs here, in the UI process, then
hands the sampling itself to app/sample_work.py through app/viewer_work.run, behind the trainer:
sampling is on the CPU (a small generator renders 64 images in milliseconds), so the trainer
keeps the device to itself.

Which generator is used is each viewer's own choice, kept in a gr.State (one student's pick
never changes another's page) and passed to every handler that samples as its first parameter,
`view`; every caption names it. By default the viewer follows the live run: the job's `generator_dir()`,
i.e. the current run's newest checkpoint, or the shipped generator while the run has saved none
yet. A viewer may instead pick any run on the server that has a generator, or the shipped one.

An upload is server-wide and replaces the followed generator: every viewer who follows samples
from it until the job's generator moves to another directory (a new run saved its first
generator) or someone presses "Use the run's generator". Further checkpoints of the run that
was current at upload time do not displace it, so a class can explore an upload while a run
trains.
"""
from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import tempfile
import threading
import time

import gradio as gr
import numpy as np

from core.config import ConfigError, whole_number
from app import sample_work, viewer_work
from app.errors import refused
from app.job import SHIPPED_GENERATOR
from app.sample_work import N_DIRECTIONS
from app.serving import SAMPLE_FOLDER_PREFIX, app_temp_folder
from core.architecture import (MAX_META_BYTES, MAX_WEIGHTS_MB, GeneratorFileError, check_class, class_names,
                               grid_columns, read_spec)
from core.rundir import FINAL_STATES, RunDir, generator_files

MAX_GRID = 256
MAX_STRIP = 32
MAX_ZIP = 256
MAX_NEIGHBOURS = 16
DIRECTION_RANGE = 5.0      # slider range in standard deviations of z along a direction
MAX_TIMELAPSE_FRAMES = 120
SEED_MAX = 2**31 - 1
FOLLOW, SHIPPED = "follow", "shipped"   # a viewer's choice of generator, besides a run's name
SEED_CLASS = "seed"        # a class picker's "no class chosen": the seed decides (seed mod the class count)
UNCONDITIONAL_NOTE = "This generator is unconditional (trained without labels): it has no classes to ask for."
NO_TIMELAPSE = "No timelapse"
# The Sample tab's outputs sized for a projector (issue 27): each image as wide as its block and as
# tall as the live grid may be while presenting (72% of the window: app/static/live.js fitGrid), so
# none is smaller than the live grid on the same screen. Gradio's own rule (scale-down) never
# enlarges: a 28 px digit stayed 28 px. Pixelated, so small tiles scale up crisp. The image takes
# its block's border and padding (and on a phone most of its section's), so there too it is as wide
# as the live grid. The label (which generator made it) stands above the image, not over it: over a
# strip it hid the strip. The page adds this to its CSS (app/ui.py PAGE_CSS).
SAMPLE_CSS = """
.block.sample-output { padding: 0; border-width: 0; }
.block.sample-output > label[data-testid="block-label"] { position: static; }
.block.sample-output .image-container { height: auto; }
.block.sample-output .image-frame { width: 100%; height: auto; }
.block.sample-output .image-frame img { width: 100%; height: auto; max-height: 72vh; object-fit: contain;
  image-rendering: pixelated; }
@media (max-width: 640px) { .block.sample-section { padding-left: 4px; padding-right: 4px; } }
"""
# Enter in a slider's number box sets the value as leaving the box does (Gradio's slider reads a
# typed number on blur only), so the output that follows the slider follows a typed number too.
ENTER_SETS_SLIDER_JS = """
if (!window.blinkEnterSetsSlider) {
  window.blinkEnterSetsSlider = true;
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key === "Enter" && box.matches && box.matches(".sample-slider input[type=number]"))
      box.dispatchEvent(new FocusEvent("blur"));
  });
}
"""


@contextlib.contextmanager
def tab_blocks():
    """The Blocks a tab is laid out in: the page's, when the tab is made inside the page's open Tab
    (its components go there, its load events are the page's); else one of its own, as a test makes
    a tab alone. Never a Blocks inside the page: Gradio builds a whole server app for each Blocks
    made (at its start and at its end), which a nested one only wastes at every start of the app."""
    from gradio.context import Context
    if Context.root_block is not None:
        yield Context.root_block
    else:
        with gr.Blocks() as blocks:
            yield blocks


def _work(fn, *args, title: str | None = None, host: bool = False):
    """sample_work's fn(*args) as viewer work (behind the trainer; `host`: the host's, in a lane of its
    own); its refusals as the page's."""
    try:
        return (viewer_work.run_for_host if host else viewer_work.run)(fn, *args)
    except sample_work.SampleError as exc:
        raise refused(str(exc), title=title or exc.title)


def _class_picker(seed_label: str, classes: int, names: list[str] = ()):
    """A class picker fitted to a generator: its classes, shown by name where it names them (a
    folder's class subfolders; the values stay the indices), or disabled with a note if it has none."""
    shown = list(names) or [str(c) for c in range(classes)]     # read_spec checked: one name per class
    choices = [(seed_label, SEED_CLASS)] + [(shown[c], str(c)) for c in range(classes)]
    if not classes:
        return gr.update(choices=choices, value=SEED_CLASS, interactive=False, info=UNCONDITIONAL_NOTE)
    return gr.update(choices=choices, interactive=True, info=f"{classes} classes")


def _int(value, name: str, low: int, high: int) -> int:
    """Server-side check of a number from the page (widgets' limits are not enforced by clients)."""
    try:
        return whole_number(value, name, low, high)
    except ConfigError as exc:
        raise refused(str(exc), title="Check the value")


def _float(value, name: str, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise refused(f"{name} must be a number.", title="Check the value")
    if not low <= number <= high:   # also refuses NaN
        raise refused(f"{name} must be between {low} and {high} (got {value}).", title="Check the value")
    return number


def as_text(text: str) -> str:
    """Markdown that shows `text` as it is: the characters that start HTML, links, images, emphasis
    or code backslash-escaped, the rest (a dataset's hyphen) left as scripts read it. For what a
    generator file or a folder named (a class, a dataset) in a caption every follower sees: Gradio's
    Markdown draws HTML, and an <img> in a class name became one."""
    return re.sub(r"([\\`*_\[\]<>&!#|~])", r"\\\1", text)


def step_word(step) -> str:
    """A generator's step as a caption says it: a whole number, else "?" (an uploaded file's may be anything)."""
    return str(step) if isinstance(step, int) and not isinstance(step, bool) else "?"


def class_word(label: int, names: list[str]) -> str:
    """A class as a caption (Markdown) says it: by name where the generator names its classes, else
    its index (MNIST's digits are their indices)."""
    return as_text(repr(names[label])) if label < len(names) else str(label)


def generator_spec(directory: str):
    """(spec, meta) of the generator in `directory`, from its small JSON file: what a handler
    checks (classes, step) before any work is queued."""
    weights, description = generator_files(directory)
    if not os.path.exists(weights):
        raise refused(sample_work.NO_GENERATOR, title="No generator yet")
    try:
        return read_spec(description)
    except GeneratorFileError as exc:
        raise refused(str(exc), title="Generator not loaded")


def run_of(directory: str) -> RunDir | None:
    """The run directory behind a generator directory; the shipped asset has no grids/."""
    run = RunDir(directory)
    return run if os.path.isdir(run.grids_folder) else None


def first_checkpoint(run: RunDir) -> str:
    """The step of a run's first generator (the trainer saves one with every checkpoint)."""
    try:
        config = run.read_config()
    except (OSError, ValueError):
        return "?"
    return str(min(config.checkpoint_every, config.steps))


# Returned files kept: the newest KEEP_OUTPUTS always, more than can be in flight (the file events
# run FILE_EVENT's limit of handlers at once, below); younger ones too, for a viewer slow to
# fetch its file after the reply (under the soak's flood a 16-file limit deleted a timelapse GIF
# while its client was still fetching it: lab/README.md, "Soak"), up to MAX_OUTPUTS whatever
# their age, so the folder stays bounded.
KEEP_OUTPUTS = 16
MAX_OUTPUTS = 64
SERVE_SECONDS = 120.0
# The events that make a file in the heavy lane (zips, GIFs, neighbours, the timelapse, the
# generator's copies): one Gradio concurrency group, larger than the lane holds, so that every
# request reaches the lane's bound and deadline (app/viewer_work.py, FILE_REQUESTS_AT_ONCE).
FILE_EVENT = dict(concurrency_id="viewer-files", concurrency_limit=viewer_work.FILE_REQUESTS_AT_ONCE)


class OutputFolders:
    """The files this tab returns, in one temp folder of this server, removed when it exits.

    Each file gets a subfolder of its own (two viewers may ask for the same name). The newest
    KEEP_OUTPUTS are kept, and any handed out in the last `serve_seconds`, up to MAX_OUTPUTS in
    all. An uploaded generator is kept until another one replaces it."""

    def __init__(self, serve_seconds: float = SERVE_SECONDS):
        self._root = None
        self._made = collections.OrderedDict()   # folder -> when it was last handed out, oldest first
        self._serve_seconds = serve_seconds
        self._lock = threading.Lock()    # events run in worker threads

    def _folder(self) -> str:
        # Returned files must live under tempfile.gettempdir() (or cwd) for Gradio to serve them.
        # It names this app as its owner: if the app dies, the next one to start removes it.
        if self._root is None or not os.path.isdir(self._root):
            self._root = app_temp_folder(SAMPLE_FOLDER_PREFIX)
        return self._root

    def path(self, name: str) -> str:
        """Where to write a file to return, in a new subfolder; the oldest beyond the limits go."""
        with self._lock:
            folder = tempfile.mkdtemp(dir=self._folder())
            now = time.monotonic()
            self._made[folder] = now
            while len(self._made) > KEEP_OUTPUTS:
                oldest, handed_out = next(iter(self._made.items()))
                if len(self._made) <= MAX_OUTPUTS and now - handed_out < self._serve_seconds:
                    break
                del self._made[oldest]
                shutil.rmtree(oldest, ignore_errors=True)
        return os.path.join(folder, name)

    def reuse(self, path: str) -> bool:
        """Serve an already-made file again (the timelapse of unchanged grids): it becomes the
        newest, so it is not the next to go while a viewer fetches it. False if it is gone."""
        folder = os.path.dirname(path)
        with self._lock:
            if folder not in self._made or not os.path.exists(path):
                return False
            self._made.move_to_end(folder)
            self._made[folder] = time.monotonic()
        return True

    def upload_folder(self, digest: str) -> str:
        """A folder for an uploaded generator (kept by us: Gradio may clean its upload cache).
        The generator uploaded before it is no longer sampled from: it goes."""
        with self._lock:
            uploads = os.path.join(self._folder(), "uploaded")
            os.makedirs(uploads, exist_ok=True)
            for name in os.listdir(uploads):
                if name != digest:
                    shutil.rmtree(os.path.join(uploads, name), ignore_errors=True)
            kept = os.path.join(uploads, digest)
            os.makedirs(kept, exist_ok=True)
        return kept


class SampleTab:
    """The Sample tab of one server: the state its viewers share, one method per event.

    generator_dir(): the generator a viewer who follows the live run sees.
    run_dir: optional callable giving the current run's directory, for the timelapse of a run
    that has grids but no generator yet; without it the run is found from generator_dir().
    runs: optional callable listing the runs with a generator, newest first, that a viewer may pick.
    require_host(key): refuses a wrong host key (the upload changes every viewer's generator).

    Every handler that samples takes the viewer's choice (FOLLOW, SHIPPED or a run's name) first.
    """

    def __init__(self, generator_dir, run_dir=None, runs=None, require_host=None, host_key_set: bool = False,
                 columns_default: int = 8):
        self.generator_dir = generator_dir
        self.run_dir = run_dir
        self.runs = runs or list
        self.require_host = require_host
        self.host_key_set = host_key_set
        self.columns_default = columns_default
        self.outputs = OutputFolders()
        # The server-wide upload (see the module doc): its folder, and the job's generator it replaced.
        self.upload_dir: str | None = None
        self.upload_base: str | None = None
        self.upload_lock = threading.Lock()
        self.timelapse_written: dict = {}    # the newest timelapse GIF: its key (run, steps) and path
        self._lay_out()

    # ---- whose generator ------------------------------------------------------------------
    def followed_dir(self) -> str:
        """The generator of a viewer who follows the live run: the job's, or the host's upload."""
        base = self.generator_dir()
        with self.upload_lock:
            if self.upload_dir and self.upload_base == base and os.path.isdir(self.upload_dir):
                return self.upload_dir
            self.upload_dir = self.upload_base = None   # a new run produced a generator: the upload gives way
        return base

    def chosen_run(self, name: str) -> RunDir:
        for run in self.runs():
            if run.name == name:
                return run
        raise refused(f"There is no run {name} with a generator on this server (old runs are deleted to make "
                      "room): pick another, or tick 'Follow the live run'.", title="Generator not found")

    def current_dir(self, view) -> str:
        """The generator directory of a viewer whose choice is `view`."""
        if (view or FOLLOW) == FOLLOW:
            return self.followed_dir()
        return SHIPPED_GENERATOR if view == SHIPPED else self.chosen_run(view).path

    def current_run(self) -> RunDir | None:
        path = self.run_dir() if self.run_dir is not None else None
        return RunDir(path) if path else None

    def describe(self, view, directory: str, step) -> str:
        """Which generator the captions show, in words: the shipped one, an upload, or run X at step N."""
        following, step = (view or FOLLOW) == FOLLOW, step_word(step)
        with self.upload_lock:
            uploaded = following and directory == self.upload_dir
        if uploaded:
            return f"the uploaded generator (step {step}), chosen by the host for everyone"
        if directory == SHIPPED_GENERATOR:
            run = self.current_run() if following else None
            if run is not None and not run.has_generator():
                return (f"run {run.name} has no generator yet (first at step {first_checkpoint(run)}); "
                        f"showing the shipped one (pre-trained, step {step})")
            return f"the shipped generator (pre-trained, step {step})"
        run = RunDir(directory)
        if not following:
            return f"run {run.name} at step {step} (your pick: others on this server may see another)"
        live = run.read_status().state not in FINAL_STATES
        return f"run {run.name} at step {step}" + (", the live run's newest checkpoint" if live else "")

    def run_choices(self) -> list[tuple[str, str]]:
        """The generator picker's entries: the shipped generator, then every run with one, newest first."""
        choices = [("The shipped generator (pre-trained)", SHIPPED)]
        for run in self.runs():
            try:
                spec, meta = read_spec(generator_files(run.path)[1])
            except GeneratorFileError:
                continue      # a damaged description: sampling from it would fail anyway
            gan = (meta.get("config") or {}).get("gan", "?")
            kind = f"{spec.classes} classes" if spec.classes else "unconditional"
            choices.append((f"{run.name}: step {meta.get('step', '?')}, {gan}, {kind}", run.name))
        return choices

    @staticmethod
    def asked_class(value, spec, name: str) -> int | None:
        """A class picker's value: None when the seed decides, else a class this generator has."""
        if value is None or str(value) in ("", SEED_CLASS):
            return None
        try:
            return check_class(spec, _int(value, name, 0, SEED_MAX))
        except ValueError as exc:
            raise refused(f"{name}: {exc}", title="Check the class")

    # ---- seeds ------------------------------------------------------------------------------
    def _seeds(self, view, seed, count, class_choice, most: int):
        """The checked inputs of a grid or zip: (directory, spec, class names, seed, count, class or None)."""
        seed, count = _int(seed, "Seed", 0, SEED_MAX), _int(count, "Count", 1, most)
        directory = self.current_dir(view)
        spec, meta = generator_spec(directory)
        return directory, spec, class_names(meta), seed, count, self.asked_class(class_choice, spec, "Class")

    def sample(self, view, seed, count, class_choice=SEED_CLASS):
        directory, spec, names, seed, count, label = self._seeds(view, seed, count, class_choice, MAX_GRID)
        columns = min(grid_columns(spec.classes, self.columns_default), count)
        grid, step = _work(sample_work.sample_grid, directory, seed, count, label, columns)
        caption = f"Generator: {self.describe(view, directory, step)}. {count} samples, seed {seed}."
        if label is not None:
            caption += f" Every sample is class {class_word(label, names)}."
        elif spec.classes:
            caption += (f" Class-conditional: each column is one class, starting from class "
                        f"{class_word(seed % spec.classes, names)} (seed mod {spec.classes}).")
        return grid, caption

    def download_samples(self, view, seed, count, class_choice=SEED_CLASS):
        """The zip's path, and which generator drew it (for its label: _name_generator)."""
        directory, _, _, seed, count, label = self._seeds(view, seed, count, class_choice, MAX_ZIP)
        name = f"seed{seed}" + ("" if label is None else f"-class{label}")
        path, step = _work(sample_work.samples_zip, directory, seed, count, label,
                           self.outputs.path(f"blink-{name}-{count}.zip"))
        return path, self.describe(view, directory, step)

    def shown(self, view, seed, count, class_choice):
        """Everything that depends on which generator the viewer sees: the follow box, the picker
        (its runs refreshed), the class pickers fitted to the generator, and a fresh grid."""
        spec, meta = generator_spec(self.current_dir(view))
        names = class_names(meta)
        grid, caption = self.sample(view, seed, count, class_choice if spec.classes else SEED_CLASS)
        following = (view or FOLLOW) == FOLLOW
        return {self.follow: following,
                self.pick: gr.update(choices=self.run_choices(), value=None if following else view),
                self.digit: _class_picker("Every class, one per column", spec.classes, names),
                self.class_a: _class_picker("The seed's class", spec.classes, names),
                self.class_b: _class_picker("The seed's class", spec.classes, names),
                self.grid: grid, self.caption: caption}

    def pick_generator(self, picked, seed=0, count=64, class_choice=SEED_CLASS, view=FOLLOW):
        """The viewer picked a run (or the shipped generator): they stop following the live run.

        Gradio reports leaving the picker (Escape, a click elsewhere) as an input even when nothing
        was picked: then the viewer's generator stays, and the picker shows it again."""
        view = view or FOLLOW
        if picked in (None, "") or str(picked) == view:
            return {self.pick: gr.update(value=None if view == FOLLOW else view)}
        view = str(picked)
        return {**self.shown(view, seed, count, class_choice), self.view: view}

    def follow_live_run(self, follow, picked=None, seed=0, count=64, class_choice=SEED_CLASS):
        view = FOLLOW if follow else str(picked or SHIPPED)
        return {**self.shown(view, seed, count, class_choice), self.view: view}

    # ---- interpolation ----------------------------------------------------------------------
    def _interpolation(self, view, seed_a, seed_b, steps, mode, class_a, class_b):
        """The checked inputs of a strip or GIF: (directory, seeds, steps, mode, the ends' classes)."""
        seed_a, seed_b = _int(seed_a, "Seed A", 0, SEED_MAX), _int(seed_b, "Seed B", 0, SEED_MAX)
        steps = _int(steps, "Steps", 2, MAX_STRIP)
        if mode not in ("linear", "spherical"):
            raise refused("Interpolation must be 'linear' or 'spherical'.", title="Check the value")
        directory = self.current_dir(view)
        spec, _ = generator_spec(directory)
        class_a, class_b = self.asked_class(class_a, spec, "Class A"), self.asked_class(class_b, spec, "Class B")
        classes = (seed_a if class_a is None else class_a, seed_b if class_b is None else class_b)
        return directory, (seed_a, seed_b), steps, mode, classes

    def interpolate(self, view, seed_a, seed_b, steps, mode, class_a=SEED_CLASS, class_b=SEED_CLASS):
        """The strip, and which generator drew it."""
        checked = self._interpolation(view, seed_a, seed_b, steps, mode, class_a, class_b)
        strip, step = _work(sample_work.interpolation_strip, *checked)
        return strip, self.describe(view, checked[0], step)

    def interpolation_gif(self, view, seed_a, seed_b, steps, mode, class_a=SEED_CLASS, class_b=SEED_CLASS):
        directory, (a, b), steps, mode, classes = self._interpolation(view, seed_a, seed_b, steps, mode,
                                                                      class_a, class_b)
        path, step = _work(sample_work.interpolation_gif, directory, (a, b), steps, mode, classes,
                           self.outputs.path(f"blink-{mode}-{a}-to-{b}.gif"))
        return path, path, self.describe(view, directory, step)

    # ---- directions, truncation and neighbours ----------------------------------------------
    def _explored(self, view, seed, psi, amounts):
        """The checked inputs of an explored image: (directory, seed, psi, the directions' amounts)."""
        seed = _int(seed, "Seed", 0, SEED_MAX)
        psi = _float(psi, "Truncation psi", 0.0, 2.0)
        amounts = [_float(a, f"Direction {i + 1}", -DIRECTION_RANGE, DIRECTION_RANGE) for i, a in enumerate(amounts)]
        directory = self.current_dir(view)
        generator_spec(directory)   # a missing or damaged generator is refused before any work is queued
        return directory, seed, psi, amounts

    def explore(self, view, seed, psi, *amounts):
        directory, seed, psi, amounts = self._explored(view, seed, psi, amounts)
        done = _work(sample_work.explored_image, directory, seed, psi, amounts)
        moved = ", ".join(f"PC{i + 1} {a:+.1f}" for i, a in enumerate(amounts) if a) or "no direction moved"
        share = ", ".join(f"{r:.0%}" for r in done["variance"])
        caption = (f"Generator: {self.describe(view, directory, done['step'])}. Seed {seed}, psi {psi:.2f}, "
                   f"{moved}. The 5 directions carry {share} of the first block's variance.")
        return done["image"], caption

    def neighbours(self, view, seed, psi, k, *amounts):
        k = _int(k, "Neighbours", 1, MAX_NEIGHBOURS)
        directory, seed, psi, amounts = self._explored(view, seed, psi, amounts)
        found = _work(sample_work.neighbours, directory, seed, psi, amounts, k, self.run_config(directory))
        caption = (f"Generator: {self.describe(view, directory, found['step'])}. "
                   f"Left: the generated image. Then its {len(found['distances'])} nearest of {found['pool']:,} "
                   f"{as_text(found['dataset'])} training images by pixel distance "
                   f"(L2: {', '.join(f'{d:.1f}' for d in found['distances'])}). Near-copies would mean memorisation.")
        return found["strip"], caption

    @staticmethod
    def run_config(directory: str) -> dict | None:
        """The config the server wrote for the run whose generator is in `directory`; None for the
        shipped or an uploaded generator (their metadata is never trusted to name files to read)."""
        run = run_of(directory)
        try:
            return run.read_config().to_dict() if run else None
        except (OSError, ValueError, TypeError):
            return None

    # ---- timelapse ----------------------------------------------------------------------------
    def grids_shown(self, view) -> tuple[RunDir, list[tuple[int, str]]]:
        """The run whose grids the viewer sees (the live one, even before its first generator, or the
        pick) and its (step, PNG) grids; refused, saying why, when there are none."""
        following = (view or FOLLOW) == FOLLOW
        run = self.current_run() if following else None
        if run is None or not os.path.isdir(run.grids_folder):
            directory = self.current_dir(view)
            run = run_of(directory)
        grids = run.grids() if run else []
        if run is None:
            with self.upload_lock:
                uploaded = following and directory == self.upload_dir
            whose = "an uploaded generator" if uploaded else "the shipped generator"
            raise refused(f"No training grids yet: the timelapse plays a run's fixed-noise grids, and {whose} "
                          "has none. Pick a run, or train one.", title=NO_TIMELAPSE)
        if not grids:
            raise refused(f"No training grids yet: run {run.name} has drawn none (the first comes with its "
                          "first step).", title=NO_TIMELAPSE)
        return run, grids

    @staticmethod
    def _from_grids(run: RunDir, fn, *args):
        """_work(fn, *args) on a run's grid files, which may go between listing and reading them
        (the run was deleted to make room): then the refusal says so, not a bare file error."""
        try:
            return _work(fn, *args)
        except FileNotFoundError:
            raise refused(f"Run {run.name}'s grids are gone from this server (old runs are deleted to make "
                          "room): pick another run, or train one.", title=NO_TIMELAPSE)

    def timelapse(self, view):
        run, grids = self.grids_shown(view)
        newest_step, newest_path = grids[-1]
        if len(grids) > MAX_TIMELAPSE_FRAMES:   # even subsample, always keeping the newest
            keep = np.linspace(0, len(grids) - 1, MAX_TIMELAPSE_FRAMES).round().astype(int)
            frames = [grids[i] for i in sorted(set(keep))]
        else:
            frames = grids
        key = (run.path, tuple(s for s, _ in frames))
        written = self.timelapse_written
        if written.get("key") != key or not self.outputs.reuse(written["path"]):
            path = self._from_grids(run, sample_work.timelapse_gif, frames,
                                    self.outputs.path(f"{run.name}-timelapse.gif"))
            self.timelapse_written = written = {"key": key, "path": path}
        first_step = grids[0][0]
        return {self.timelapse_gif: written["path"],
                self.step_slider: gr.Slider(minimum=first_step, maximum=max(newest_step, first_step + 1),
                                            value=newest_step, step=1, label="Grid at step", interactive=True),
                self.step_grid: self._from_grids(run, sample_work.read_png, newest_path),
                self.timelapse_caption: (f"Run {run.name}'s fixed-noise grids: {len(grids)} grids, step {first_step} "
                                         f"to {newest_step}; showing step {newest_step}.")}

    def grid_at(self, view, step):
        step = _float(step, "Grid at step", 0, 10**9)
        run, grids = self.grids_shown(view)
        chosen, path = min(grids, key=lambda g: (abs(g[0] - step), -g[0]))   # nearest logged grid
        return (self._from_grids(run, sample_work.read_png, path),
                f"Run {run.name}'s grid at step {chosen} (of {len(grids)} logged, newest {grids[-1][0]}).")

    # ---- generator files -----------------------------------------------------------------------
    def download_generator(self, view):
        """Copies of the generator's two files, and which generator they are."""
        directory = self.current_dir(view)
        files = list(generator_files(directory))
        if not all(os.path.exists(f) for f in files):
            raise refused("No generator has been saved yet.", title="No generator yet")
        # Copied into this tab's own output folder: Gradio serves only files under the temp folder
        # or the app's folder, and BLINK_RUNS_DIR may be anywhere (a /data disk, a private TMPDIR).
        copies = _work(sample_work.copy_files, files, [self.outputs.path(os.path.basename(f)) for f in files])
        try:   # the step of the copy handed out, not of a newer checkpoint saved meanwhile
            step = read_spec(copies[1])[1].get("step", "?")
        except GeneratorFileError:
            step = "?"
        return copies, self.describe(view, directory, step)

    def upload_generator(self, files, key=""):
        if self.require_host:   # the generator everyone on the server samples from: the host's to change
            self.require_host(key)
        paths = [f if isinstance(f, str) else getattr(f, "name", None) for f in (files or [])]
        weights = [p for p in paths if p and p.lower().endswith(".safetensors")]
        metas = [p for p in paths if p and p.lower().endswith(".json")]
        if len(weights) != 1 or len(metas) != 1 or len(paths) != 2:
            raise refused("Upload exactly two files: generator.safetensors and generator.json "
                          "(pickles such as .pt/.pth/.ckpt are never loaded).", title="Upload refused")
        if not all(os.path.exists(p) for p in paths):   # an unused upload is removed after a while (app/serving.py)
            raise refused("The uploaded files are no longer on the server: choose them again.", title="Upload refused")
        for path, limit in ((weights[0], MAX_WEIGHTS_MB * 2**20), (metas[0], MAX_META_BYTES)):
            if os.path.getsize(path) > limit:   # before hashing or copying anything big
                raise refused(f"{os.path.basename(path)} is too large ({os.path.getsize(path):,} bytes; "
                              f"limit {limit:,}).", title="Upload refused")
        # Every check before the upload replaces the one in use; then the kept copy is loaded.
        digest = _work(sample_work.check_upload, weights[0], metas[0], title="Upload refused", host=True)
        kept = self.outputs.upload_folder(digest)
        spec = _work(sample_work.install_generator, weights[0], metas[0], kept, host=True)
        with self.upload_lock:
            self.upload_dir, self.upload_base = kept, self.generator_dir()
        return (f"Using the uploaded generator ({spec['channels']}x{spec['resolution']}x{spec['resolution']}, "
                f"z {spec['z_dim']}, width {spec['width']}, step {step_word(spec['step'])}) for everyone on this server, "
                "until a new run saves a generator or you switch back.")

    def use_run_generator(self, key=""):
        if self.require_host:
            self.require_host(key)
        with self.upload_lock:
            self.upload_dir = self.upload_base = None
        return f"Using the run's generator ({os.path.basename(self.generator_dir().rstrip(os.sep))})."

    # ---- layout and events ---------------------------------------------------------------------
    def _lay_out(self) -> None:
        """The tab, where it is made: in the page's open Tab, or in a Blocks of its own (tab_blocks)."""
        with tab_blocks():
            self.view = gr.State(FOLLOW)    # this viewer's generator: FOLLOW, SHIPPED or a run's name
            self._render_seeds()
            self._render_interpolation()
            self._render_directions()
            self._render_timelapse()
            self._render_generator_files()
            self.shown_outputs = [self.follow, self.pick, self.digit, self.class_a, self.class_b, self.grid,
                                  self.caption]
            # The viewer's choice goes last: a State is no parameter of the named API.
            self.pick.input(self.pick_generator, [self.pick, self.seed, self.count, self.digit, self.view],
                            [self.view, *self.shown_outputs], api_name="choose_generator")
            self.follow.input(self.follow_live_run, [self.follow, self.pick, self.seed, self.count, self.digit],
                              [self.view, *self.shown_outputs], api_name="follow_live_run")
            gr.HTML("", js_on_load=ENTER_SETS_SLIDER_JS, apply_default_css=False, container=False, padding=False)

    @staticmethod
    def _name_generator(event, made_by: gr.State, *outputs) -> None:
        """Once `event` succeeded, each of its outputs' labels says which generator made it (`made_by`,
        which the event's handler set). A step of its own: an output updated with a label reaches a
        script through the named API as a dict, not as the plain file or image it was."""
        labels = [output.label for output in outputs]

        def name(who):
            updates = [gr.update(label=f"{label}. Generator: {who}") for label in labels]
            return updates if len(updates) > 1 else updates[0]
        event.success(name, made_by, list(outputs), api_visibility="private", show_progress="hidden")

    def show_on(self, triggers) -> None:
        """Refresh what depends on the viewer's generator on these events (page open, tab opened, run end)."""
        gr.on(triggers, self.shown, self.sample_inputs, self.shown_outputs, api_visibility="private",
              show_progress="hidden")

    def _render_seeds(self) -> None:
        with gr.Row():
            self.follow = gr.Checkbox(value=True, label="Follow the live run",
                                      info="its newest checkpoint each time you sample (the shipped generator until it has one)")
            # Custom values are allowed because the runs change after the page was built; the
            # handlers accept only the runs on this server.
            self.pick = gr.Dropdown([("The shipped generator (pre-trained)", SHIPPED)], value=None,
                                    allow_custom_value=True, label="Or pick a generator",
                                    info="runs on this server that saved one, newest first")
        with gr.Row():
            self.seed = gr.Number(value=0, precision=None, label="Seed", minimum=0)
            self.count = gr.Slider(1, MAX_GRID, value=64, step=1, label="Count", elem_classes=["sample-slider"])
            self.digit = gr.Dropdown([("Every class, one per column", SEED_CLASS)], value=SEED_CLASS,
                                     allow_custom_value=True, label="Class", info="of a class-conditional generator")
            sample_button = gr.Button("Sample", variant="primary")
            zip_button = gr.Button("Download samples (zip of PNGs)")
        self.caption = gr.Markdown(elem_id="sample-caption")
        self.grid = gr.Image(label="Samples", format="png", type="numpy", interactive=False, elem_id="sample-grid",
                             elem_classes=["sample-output"])
        samples_zip = gr.File(label="Samples (zip)", elem_id="sample-zip")
        zip_made_by = gr.State("")

        self.sample_inputs = [self.view, self.seed, self.count, self.digit]
        sample_button.click(self.sample, self.sample_inputs, [self.grid, self.caption], api_name="sample")
        self.digit.input(self.sample, self.sample_inputs, [self.grid, self.caption], api_visibility="private")
        self.count.release(self.sample, self.sample_inputs, [self.grid, self.caption], api_visibility="private",
                           trigger_mode="always_last")
        self._name_generator(zip_button.click(self.download_samples, self.sample_inputs, [samples_zip, zip_made_by],
                                              api_name="download_samples", **FILE_EVENT), zip_made_by, samples_zip)

    def _render_interpolation(self) -> None:
        with gr.Accordion("Interpolate between two seeds", open=True, elem_classes=["sample-section"]):
            with gr.Row():
                seed_a = gr.Number(value=1, precision=None, label="Seed A", minimum=0)
                seed_b = gr.Number(value=2, precision=None, label="Seed B", minimum=0)
                strip_steps = gr.Slider(2, MAX_STRIP, value=10, step=1, label="Steps", elem_classes=["sample-slider"])
                mode = gr.Radio(["linear", "spherical"], value="spherical", label="Interpolation")
                self.class_a, self.class_b = [
                    gr.Dropdown([("The seed's class", SEED_CLASS)], value=SEED_CLASS, allow_custom_value=True,
                                label=f"Class {end}", info="morph one class into another") for end in "AB"]
                interpolate_button = gr.Button("Interpolate")
                gif_button = gr.Button("Make GIF")
            strip = gr.Image(label="Interpolation", format="png", type="numpy", interactive=False,
                             elem_id="sample-strip", elem_classes=["sample-output"])
            with gr.Row():
                gif_preview = gr.Image(label="Interpolation (animated)", type="filepath", interactive=False,
                                       elem_id="sample-gif", elem_classes=["sample-output"])
                gif_file = gr.File(label="Interpolation GIF", elem_id="sample-gif-file")

        inputs = [self.view, seed_a, seed_b, strip_steps, mode, self.class_a, self.class_b]
        strip_made_by, gif_made_by = gr.State(""), gr.State("")
        self._name_generator(interpolate_button.click(self.interpolate, inputs, [strip, strip_made_by],
                                                      api_name="interpolate"), strip_made_by, strip)
        self._name_generator(strip_steps.release(self.interpolate, inputs, [strip, strip_made_by],
                                                 api_visibility="private", trigger_mode="always_last"),
                             strip_made_by, strip)
        self._name_generator(gif_button.click(self.interpolation_gif, inputs, [gif_preview, gif_file, gif_made_by],
                                              api_name="interpolation_gif", **FILE_EVENT),
                             gif_made_by, gif_preview, gif_file)

    def _render_directions(self) -> None:
        with gr.Accordion("Directions, truncation and nearest real images", open=True, elem_classes=["sample-section"]):
            gr.Markdown("Five directions found by PCA of the generator's first-layer features (GANSpace), "
                        "in standard deviations of the latent. Psi < 1 pulls the latent toward the mean: "
                        "more typical, less varied.")
            with gr.Row():
                explore_seed = gr.Number(value=0, precision=None, label="Explore seed", minimum=0)
                psi = gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="Truncation psi", elem_classes=["sample-slider"])
                k = gr.Slider(1, MAX_NEIGHBOURS, value=6, step=1, label="Neighbours", elem_classes=["sample-slider"])
            sliders = [gr.Slider(-DIRECTION_RANGE, DIRECTION_RANGE, value=0.0, step=0.1, label=f"Direction {i + 1}",
                                 elem_classes=["sample-slider"]) for i in range(N_DIRECTIONS)]
            with gr.Row():
                explore_button = gr.Button("Render")
                reset_button = gr.Button("Reset directions")
                neighbours_button = gr.Button("Nearest real images")
            # One below the other: the neighbours' strip is wide, and beside the image it would be
            # narrower than the live grid.
            explore_caption = gr.Markdown(elem_id="explore-caption")
            explored = gr.Image(label="Explored image", format="png", type="numpy", interactive=False,
                                elem_id="sample-explored", elem_classes=["sample-output"])
            neighbour_caption = gr.Markdown(elem_id="neighbour-caption")
            neighbour_strip = gr.Image(label="Nearest training images", format="png", type="numpy",
                                       interactive=False, elem_id="sample-neighbours", elem_classes=["sample-output"])

        inputs, outputs = [self.view, explore_seed, psi, *sliders], [explored, explore_caption]
        explore_button.click(self.explore, inputs, outputs, api_name="explore")
        explore_seed.submit(self.explore, inputs, outputs, api_visibility="private")
        # .release, not .change: one render when the student lets go, not one per tick of a drag.
        for slider in [psi, *sliders]:
            slider.release(self.explore, inputs, outputs, api_visibility="private", trigger_mode="always_last")
        reset_button.click(lambda: [0.0] * N_DIRECTIONS, None, sliders, api_visibility="private").then(
            self.explore, inputs, outputs, api_visibility="private")
        neighbours_button.click(self.neighbours, [self.view, explore_seed, psi, k, *sliders],
                                [neighbour_strip, neighbour_caption], api_name="neighbours", **FILE_EVENT)

    def _render_timelapse(self) -> None:
        with gr.Accordion("Training timelapse", open=False, elem_classes=["sample-section"]):
            gr.Markdown("The run's fixed-noise grids, oldest to newest, playing as a loop (a GIF: its download "
                        "button keeps it; no MP4, that would need ffmpeg). The slider stops at one step.")
            timelapse_button = gr.Button("Load timelapse")
            self.timelapse_caption = gr.Markdown(elem_id="timelapse-caption")
            # One below the other, each as wide as the live grid. The slider waits for the run's
            # grids: before them its range means nothing.
            self.timelapse_gif = gr.Image(label="Timelapse (animated)", type="filepath", interactive=False,
                                          elem_id="sample-timelapse", elem_classes=["sample-output"])
            self.step_slider = gr.Slider(0, 1, value=1, step=1, label="Grid at step", interactive=False,
                                         elem_classes=["sample-slider"])
            self.step_grid = gr.Image(label="Grid at the chosen step", format="png", type="numpy",
                                      interactive=False, elem_id="sample-step-grid", elem_classes=["sample-output"])

        timelapse_button.click(self.timelapse, self.view,
                               [self.timelapse_gif, self.step_slider, self.step_grid, self.timelapse_caption],
                               api_name="timelapse", **FILE_EVENT)
        self.step_slider.release(self.grid_at, [self.view, self.step_slider], [self.step_grid, self.timelapse_caption],
                                 api_name="grid_at", trigger_mode="always_last")

    def _render_generator_files(self) -> None:
        with gr.Accordion("Generator files", open=False, elem_classes=["sample-section"]):
            with gr.Row():
                download_button = gr.Button("Download generator")
                files = gr.File(label="Generator (safetensors + config JSON)", file_count="multiple",
                                elem_id="generator-files")
            with gr.Row():
                uploaded = gr.File(label="Upload a generator (generator.safetensors + generator.json)",
                                   file_count="multiple", file_types=[".safetensors", ".json"], type="filepath")
                upload_button = gr.Button("Use uploaded generator")
                back_button = gr.Button("Use the run's generator")
            generator_key = gr.Textbox(label="Host key (the generator is shared by everyone on this server)",
                                       type="password", value="", visible=self.host_key_set)
            upload_status = gr.Markdown()

        files_made_by = gr.State("")
        self._name_generator(download_button.click(self.download_generator, self.view, [files, files_made_by],
                                                   api_name="download_generator", **FILE_EVENT), files_made_by, files)
        upload_button.click(self.upload_generator, [uploaded, generator_key], upload_status, api_name="upload_generator")
        back_button.click(self.use_run_generator, generator_key, upload_status, api_name="use_run_generator")
