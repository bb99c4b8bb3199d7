"""The Sample tab's handlers: explore a trained generator without training (its page: app/sample_page.py).

Each checks its inputs here, in the UI process, then hands the sampling to app/sample_work.py through
app/viewer_work, on the CPU behind the trainer. A viewer's choice of generator (`view`: FOLLOW,
SHIPPED or a run's name) is a gr.State, so one student's pick never changes another's page; every
caption names it. Followers see the job's generator_dir(), or the host's upload until a new run saves
a generator or the host switches back.
"""
from __future__ import annotations

import collections
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
# The page's limits and values, which the handlers check again; SAMPLE_CSS and tab_blocks for app/ui.py.
from app.sample_page import (DIRECTION_RANGE, FOLLOW, MAX_GRID, MAX_NEIGHBOURS, MAX_STRIP, SAMPLE_CSS,  # noqa: F401
                             SEED_CLASS, SHIPPED, SHIPPED_CHOICE, SamplePage, tab_blocks)
from app.serving import SAMPLE_FOLDER_PREFIX, app_temp_folder
from core.architecture import (MAX_META_BYTES, MAX_WEIGHTS_MB, GeneratorFileError, check_class, class_names,
                               grid_columns, read_spec)
from core.rundir import FINAL_STATES, RunDir, generator_files

MAX_ZIP = 256
MAX_TIMELAPSE_FRAMES = 120
SEED_MAX = 2**31 - 1
UNCONDITIONAL_NOTE = "This generator is unconditional (trained without labels): it has no classes to ask for."
NO_TIMELAPSE = "No timelapse"
CHECK_VALUE = "Check the value"
# Returned files kept: the newest KEEP_OUTPUTS (more than sample_page.FILE_EVENT lets be in flight), and
# those younger than SERVE_SECONDS up to MAX_OUTPUTS, for a viewer slow to fetch its file (lab/README.md, "Soak").
KEEP_OUTPUTS = 16
MAX_OUTPUTS = 64
SERVE_SECONDS = 120.0


def _work(fn, *args, title: str | None = None, host: bool = False):
    """sample_work's fn(*args) as viewer work (`host`: in the host's own lane); its refusals as the page's."""
    try:
        return (viewer_work.run_for_host if host else viewer_work.run)(fn, *args)
    except sample_work.SampleError as exc:
        raise refused(str(exc), title=title or exc.title)


def _int(value, name: str, low: int, high: int) -> int:
    """Checked here: clients do not enforce the widgets' limits."""
    try:
        return whole_number(value, name, low, high)
    except ConfigError as exc:
        raise refused(str(exc), title=CHECK_VALUE)


def _float(value, name: str, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise refused(f"{name} must be a number.", title=CHECK_VALUE)
    if not low <= number <= high:   # also refuses NaN
        raise refused(f"{name} must be between {low} and {high} (got {value}).", title=CHECK_VALUE)
    return number


def _following(view) -> bool:
    return (view or FOLLOW) == FOLLOW


def as_text(text: str) -> str:
    """Markdown that shows `text` (a class or dataset a generator file or folder named) as it is:
    Gradio's Markdown draws HTML, and an <img> in a class name became one."""
    return re.sub(r"([\\`*_\[\]<>&!#|~])", r"\\\1", text)


def step_word(step) -> str:
    """A whole number, else "?" (an uploaded file's step may be anything)."""
    return str(step) if isinstance(step, int) and not isinstance(step, bool) else "?"


def class_word(label: int, names: list[str]) -> str:
    return as_text(repr(names[label])) if label < len(names) else str(label)


def generator_spec(directory: str):
    """(spec, meta) from the generator's small JSON file, checked before any work is queued."""
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


def run_config(directory: str) -> dict | None:
    """The config the server wrote for the generator's run; None for the shipped or an uploaded
    generator (their metadata is never trusted to name files to read)."""
    run = run_of(directory)
    try:
        return run.read_config().to_dict() if run else None
    except (OSError, ValueError, TypeError):
        return None


def first_checkpoint(run: RunDir) -> str:
    try:
        config = run.read_config()
    except (OSError, ValueError):
        return "?"
    return str(min(config.checkpoint_every, config.steps))


def _class_picker(seed_label: str, classes: int, names: list[str] = ()):
    """Fitted to a generator: its classes by name where it names them (the values stay the indices)."""
    shown = list(names) or [str(c) for c in range(classes)]     # read_spec checked: one name per class
    choices = [(seed_label, SEED_CLASS)] + [(shown[c], str(c)) for c in range(classes)]
    if not classes:
        return gr.update(choices=choices, value=SEED_CLASS, interactive=False, info=UNCONDITIONAL_NOTE)
    return gr.update(choices=choices, interactive=True, info=f"{classes} classes")


def _from_grids(run: RunDir, fn, *args):
    """_work on a run's grid files, which may go between listing and reading them."""
    try:
        return _work(fn, *args)
    except FileNotFoundError:
        raise refused(f"Run {run.name}'s grids are gone from this server (old runs are deleted to make "
                      "room): pick another run, or train one.", title=NO_TIMELAPSE)


class OutputFolders:
    """The files this tab returns, each in a subfolder of its own (two viewers may ask for the same
    name) of one temp folder of this server. An uploaded generator is kept until another replaces it."""

    def __init__(self, serve_seconds: float = SERVE_SECONDS):
        self._root = None
        self._made = collections.OrderedDict()   # folder -> when it was last handed out, oldest first
        self._serve_seconds = serve_seconds
        self._lock = threading.Lock()    # events run in worker threads

    def _folder(self) -> str:
        # Gradio serves files only under tempfile.gettempdir() (or cwd). The folder names this app
        # as its owner: if the app dies, the next one to start removes it.
        if self._root is None or not os.path.isdir(self._root):
            self._root = app_temp_folder(SAMPLE_FOLDER_PREFIX)
        return self._root

    def path(self, name: str) -> str:
        """Where to write a file to return; the oldest beyond the limits go."""
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
        """Serve a made file again as the newest, so it is not the next to go; False if it is gone."""
        folder = os.path.dirname(path)
        with self._lock:
            if folder not in self._made or not os.path.exists(path):
                return False
            self._made.move_to_end(folder)
            self._made[folder] = time.monotonic()
        return True

    def upload_folder(self, digest: str) -> str:
        """A folder of ours for an uploaded generator (Gradio may clean its upload cache); the one
        uploaded before it is no longer sampled from, and goes."""
        with self._lock:
            uploads = os.path.join(self._folder(), "uploaded")
            os.makedirs(uploads, exist_ok=True)
            for name in os.listdir(uploads):
                if name != digest:
                    shutil.rmtree(os.path.join(uploads, name), ignore_errors=True)
            kept = os.path.join(uploads, digest)
            os.makedirs(kept, exist_ok=True)
        return kept


class SampleTab(SamplePage):
    """The Sample tab of one server: the state its viewers share, one method per event.

    generator_dir(): what a follower sees. run_dir(): the current run's directory, for the timelapse
    of a run with no generator yet. runs(): the runs with a generator, newest first, that a viewer
    may pick. require_host(key): refuses a wrong host key (an upload changes every viewer's generator).
    """

    def __init__(self, generator_dir, run_dir=None, runs=None, require_host=None, host_key_set: bool = False):
        self.generator_dir, self.run_dir, self.runs = generator_dir, run_dir, runs or list
        self.require_host, self.host_key_set = require_host, host_key_set
        self.outputs = OutputFolders()
        self.upload_dir = self.upload_base = None    # the server-wide upload, and the job's generator it replaced
        self.upload_lock = threading.Lock()
        self.timelapse_written: dict = {}    # the newest timelapse GIF: its key (run, steps) and path
        self._lay_out()

    # ---- whose generator ------------------------------------------------------------------
    def followed_dir(self) -> str:
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
        if _following(view):
            return self.followed_dir()
        return SHIPPED_GENERATOR if view == SHIPPED else self.chosen_run(view).path

    def current_run(self) -> RunDir | None:
        path = self.run_dir() if self.run_dir is not None else None
        return RunDir(path) if path else None

    def _uploaded(self, view, directory: str) -> bool:
        with self.upload_lock:
            return _following(view) and directory == self.upload_dir

    def describe(self, view, directory: str, step) -> str:
        """Which generator the captions show: the shipped one, an upload, or run X at step N."""
        following, step = _following(view), step_word(step)
        if self._uploaded(view, directory):
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
        choices = [SHIPPED_CHOICE]
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
        """None when the seed decides, else a class this generator has."""
        if value is None or str(value) in ("", SEED_CLASS):
            return None
        try:
            return check_class(spec, _int(value, name, 0, SEED_MAX))
        except ValueError as exc:
            raise refused(f"{name}: {exc}", title="Check the class")

    # ---- seeds ------------------------------------------------------------------------------
    def _seeds(self, view, seed, count, class_choice, most: int):
        """(directory, spec, class names, seed, count, class or None), checked."""
        seed, count = _int(seed, "Seed", 0, SEED_MAX), _int(count, "Count", 1, most)
        directory = self.current_dir(view)
        spec, meta = generator_spec(directory)
        return directory, spec, class_names(meta), seed, count, self.asked_class(class_choice, spec, "Class")

    def sample(self, view, seed, count, class_choice=SEED_CLASS):
        directory, spec, names, seed, count, label = self._seeds(view, seed, count, class_choice, MAX_GRID)
        columns = min(grid_columns(spec.classes), count)
        grid, step = _work(sample_work.sample_grid, directory, seed, count, label, columns)
        caption = f"Generator: {self.describe(view, directory, step)}. {count} samples, seed {seed}."
        if label is not None:
            caption += f" Every sample is class {class_word(label, names)}."
        elif spec.classes:
            caption += (f" Class-conditional: each column is one class, starting from class "
                        f"{class_word(seed % spec.classes, names)} (seed mod {spec.classes}).")
        return grid, caption

    def download_samples(self, view, seed, count, class_choice=SEED_CLASS):
        directory, _, _, seed, count, label = self._seeds(view, seed, count, class_choice, MAX_ZIP)
        name = f"seed{seed}" + ("" if label is None else f"-class{label}")
        path, step = _work(sample_work.samples_zip, directory, seed, count, label,
                           self.outputs.path(f"blink-{name}-{count}.zip"))
        return path, self.describe(view, directory, step)

    def shown(self, view, seed, count, class_choice):
        """What depends on the viewer's generator: the follow box, the picker (its runs refreshed),
        the class pickers fitted to the generator, and a fresh grid."""
        spec, meta = generator_spec(self.current_dir(view))
        names = class_names(meta)
        grid, caption = self.sample(view, seed, count, class_choice if spec.classes else SEED_CLASS)
        following = _following(view)
        return {self.follow: following,
                self.pick: gr.update(choices=self.run_choices(), value=None if following else view),
                self.digit: _class_picker("Every class, one per column", spec.classes, names),
                self.class_a: _class_picker("The seed's class", spec.classes, names),
                self.class_b: _class_picker("The seed's class", spec.classes, names),
                self.grid: grid, self.caption: caption}

    def pick_generator(self, picked, seed=0, count=64, class_choice=SEED_CLASS, view=FOLLOW):
        """The viewer stops following the live run for their pick. Gradio reports leaving the picker
        (Escape, a click elsewhere) as an input even when nothing was picked: then nothing changes."""
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
        """(directory, seeds, steps, mode, the ends' classes), checked."""
        seed_a, seed_b = _int(seed_a, "Seed A", 0, SEED_MAX), _int(seed_b, "Seed B", 0, SEED_MAX)
        steps = _int(steps, "Steps", 2, MAX_STRIP)
        if mode not in ("linear", "spherical"):
            raise refused("Interpolation must be 'linear' or 'spherical'.", title=CHECK_VALUE)
        directory = self.current_dir(view)
        spec, _ = generator_spec(directory)
        class_a, class_b = self.asked_class(class_a, spec, "Class A"), self.asked_class(class_b, spec, "Class B")
        classes = (seed_a if class_a is None else class_a, seed_b if class_b is None else class_b)
        return directory, (seed_a, seed_b), steps, mode, classes

    def interpolate(self, view, seed_a, seed_b, steps, mode, class_a=SEED_CLASS, class_b=SEED_CLASS):
        checked = self._interpolation(view, seed_a, seed_b, steps, mode, class_a, class_b)
        strip, step = _work(sample_work.interpolation_strip, *checked)
        return strip, self.describe(view, checked[0], step)

    def interpolation_gif(self, view, seed_a, seed_b, steps, mode, class_a=SEED_CLASS, class_b=SEED_CLASS):
        checked = self._interpolation(view, seed_a, seed_b, steps, mode, class_a, class_b)
        (a, b), mode = checked[1], checked[3]
        path, step = _work(sample_work.interpolation_gif, *checked, self.outputs.path(f"blink-{mode}-{a}-to-{b}.gif"))
        return path, path, self.describe(view, checked[0], step)

    # ---- directions, truncation and neighbours ----------------------------------------------
    def _explored(self, view, seed, psi, amounts):
        """(directory, seed, psi, the directions' amounts), checked."""
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
        found = _work(sample_work.neighbours, directory, seed, psi, amounts, k, run_config(directory))
        caption = (f"Generator: {self.describe(view, directory, found['step'])}. "
                   f"Left: the generated image. Then its {len(found['distances'])} nearest of {found['pool']:,} "
                   f"{as_text(found['dataset'])} training images by pixel distance "
                   f"(L2: {', '.join(f'{d:.1f}' for d in found['distances'])}). Near-copies would mean memorisation.")
        return found["strip"], caption

    # ---- timelapse ----------------------------------------------------------------------------
    def grids_shown(self, view) -> tuple[RunDir, list[tuple[int, str]]]:
        """The run whose grids the viewer sees (the live one, even before its first generator, or the
        pick) and its (step, PNG) grids; refused, saying why, when there are none."""
        run = self.current_run() if _following(view) else None
        if run is None or not os.path.isdir(run.grids_folder):
            directory = self.current_dir(view)
            run = run_of(directory)
        if run is None:
            whose = "an uploaded generator" if self._uploaded(view, directory) else "the shipped generator"
            raise refused(f"No training grids yet: the timelapse plays a run's fixed-noise grids, and {whose} "
                          "has none. Pick a run, or train one.", title=NO_TIMELAPSE)
        grids = run.grids()
        if not grids:
            raise refused(f"No training grids yet: run {run.name} has drawn none (the first comes with its "
                          "first step).", title=NO_TIMELAPSE)
        return run, grids

    def timelapse(self, view):
        run, grids = self.grids_shown(view)
        (first_step, _), (newest_step, newest_path) = grids[0], grids[-1]
        frames = grids
        if len(grids) > MAX_TIMELAPSE_FRAMES:   # even subsample, always keeping the newest
            keep = np.linspace(0, len(grids) - 1, MAX_TIMELAPSE_FRAMES).round().astype(int)
            frames = [grids[i] for i in sorted(set(keep))]
        key = (run.path, tuple(s for s, _ in frames))
        written = self.timelapse_written
        if written.get("key") != key or not self.outputs.reuse(written["path"]):
            path = _from_grids(run, sample_work.timelapse_gif, frames, self.outputs.path(f"{run.name}-timelapse.gif"))
            self.timelapse_written = written = {"key": key, "path": path}
        return {self.timelapse_gif: written["path"],
                self.step_slider: gr.Slider(minimum=first_step, maximum=max(newest_step, first_step + 1),
                                            value=newest_step, step=1, label="Grid at step", interactive=True),
                self.step_grid: _from_grids(run, sample_work.read_png, newest_path),
                self.timelapse_caption: (f"Run {run.name}'s fixed-noise grids: {len(grids)} grids, step {first_step} "
                                         f"to {newest_step}; showing step {newest_step}.")}

    def grid_at(self, view, step):
        step = _float(step, "Grid at step", 0, 10**9)
        run, grids = self.grids_shown(view)
        chosen, path = min(grids, key=lambda g: (abs(g[0] - step), -g[0]))   # nearest logged grid
        return (_from_grids(run, sample_work.read_png, path),
                f"Run {run.name}'s grid at step {chosen} (of {len(grids)} logged, newest {grids[-1][0]}).")

    # ---- generator files -----------------------------------------------------------------------
    def download_generator(self, view):
        directory = self.current_dir(view)
        files = list(generator_files(directory))
        if not all(os.path.exists(f) for f in files):
            raise refused("No generator has been saved yet.", title="No generator yet")
        # Copied: Gradio serves only files under the temp or the app's folder, and BLINK_RUNS_DIR may be anywhere.
        copies = _work(sample_work.copy_files, files, [self.outputs.path(os.path.basename(f)) for f in files])
        try:   # the step of the copy handed out, not of a newer checkpoint saved meanwhile
            step = read_spec(copies[1])[1].get("step", "?")
        except GeneratorFileError:
            step = "?"
        return copies, self.describe(view, directory, step)

    def upload_generator(self, files, key=""):
        if self.require_host:
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
