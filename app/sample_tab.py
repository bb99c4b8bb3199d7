"""The Sample tab: explore a trained generator without training.

Seeds -> grid; two seeds -> interpolation strip and GIF; GANSpace directions and truncation
on one image; its nearest training images; the run's fixed-noise timelapse; downloads (the
generator, a zip of samples) and an upload of a generator pair.

Sampling runs on the CPU in the UI process (a small generator renders 64 images in
milliseconds), so the trainer keeps the device to itself.

Which generator is used is each viewer's own choice, kept in a gr.State (one student's pick
never changes another's page), and every caption names it. By default the viewer follows the
live run: the job's `generator_dir()`, i.e. the current run's newest checkpoint, or the shipped
generator while the run has saved none yet. A viewer may instead pick any run on the server
that has a generator, or the shipped one.

An upload is server-wide and replaces the followed generator: every viewer who follows samples
from it until the job's generator moves to another directory (a new run saved its first
generator) or someone presses "Use the run's generator". Further checkpoints of the run that
was current at upload time do not displace it, so a class can explore an upload while a run
trains.
"""
from __future__ import annotations

import atexit
import collections
import contextvars
import hashlib
import inspect
import os
import shutil
import tempfile
import threading

import gradio as gr
import numpy as np
import torch

from core.config import ConfigError, whole_number
from core.data import DatasetError
from app import viewer_work
from app.errors import refused
from app.job import SHIPPED_GENERATOR
from core import sample as sampling
from core.images import gif_bytes, grid_image, to_model_range, to_uint8
from core.rundir import FINAL_STATES, RunDir, write_atomic

MAX_GRID = 256
MAX_STRIP = 32
MAX_ZIP = 256
MAX_NEIGHBOURS = 16
N_DIRECTIONS = 5
DIRECTION_RANGE = 5.0      # slider range in standard deviations of z along a direction
MAX_TIMELAPSE_FRAMES = 120
SEED_MAX = 2**31 - 1
KEPT_GENERATORS = 4        # loaded at once: viewers may look at different runs
FOLLOW, SHIPPED = "follow", "shipped"   # a viewer's choice of generator, besides a run's name
SEED_CLASS = "seed"        # a class picker's "no class chosen": the seed decides (seed mod the class count)
UNCONDITIONAL_NOTE = "This generator is unconditional (trained without labels): it has no classes to ask for."
# The viewer of the event being handled (see for_viewer); FOLLOW outside any event.
_VIEWED = contextvars.ContextVar("viewed_generator", default=FOLLOW)


def _keep(store: dict, key, value, limit: int = KEPT_GENERATORS):
    """store[key] = value, dropping the oldest entries beyond limit."""
    store[key] = value
    while len(store) > limit:
        store.pop(next(iter(store)))
    return value


class GeneratorCache:
    """Loaded generators, each reloaded only when its file changes (a run saves a newer one)."""

    def __init__(self):
        self._loaded: dict = {}          # (directory, file mtime) -> (generator, meta)
        self._lock = threading.Lock()    # events run in worker threads

    def get(self, directory: str):
        return self.get_with_key(directory)[0]

    def get_with_key(self, directory: str):
        """((generator, meta), key); the key changes whenever another file is loaded."""
        weights = os.path.join(directory, "generator.safetensors")
        try:
            key = (directory, os.stat(weights).st_mtime_ns)
        except OSError:
            raise refused("No generator to sample from yet: train a run, or wait for its first checkpoint.")
        with self._lock:
            if key not in self._loaded:
                try:
                    _keep(self._loaded, key, sampling.load_generator(weights, os.path.join(directory, "generator.json")))
                except sampling.GeneratorFileError as exc:
                    raise refused(str(exc), title="Generator not loaded")
            return self._loaded[key], key


def for_viewer(handler):
    """The event handler `handler(*inputs)` for wiring with the viewer's gr.State as first input.

    The viewer's choice is set in a context variable for this one call (private to the thread that
    runs it, and reset after), so `current_dir()` under any handler sees it without every handler
    taking it as a parameter."""
    def call(view, *inputs):
        token = _VIEWED.set(view or FOLLOW)
        try:
            return handler(*inputs)
        finally:
            _VIEWED.reset(token)

    def handle(view, *inputs):
        return viewer_work.run(call, view, *inputs)   # behind the trainer, a few at a time
    # Gradio reads the signature to check the inputs and to name the API's parameters.
    handle.__signature__ = inspect.Signature([inspect.Parameter("view", inspect.Parameter.POSITIONAL_ONLY),
                                              *inspect.signature(handler).parameters.values()])
    return handle


def _class_picker(seed_label: str, classes: int):
    """A class picker fitted to a generator: its classes, or disabled with a note if it has none."""
    choices = [(seed_label, SEED_CLASS)] + [(str(c), str(c)) for c in range(classes)]
    if not classes:
        return gr.update(choices=choices, value=SEED_CLASS, interactive=False, info=UNCONDITIONAL_NOTE)
    return gr.update(choices=choices, interactive=True, info=f"{classes} classes")


def _int(value, name: str, low: int, high: int) -> int:
    """Server-side check of a number from the page (widgets' limits are not enforced by clients)."""
    try:
        return whole_number(value, name, low, high)
    except ConfigError as exc:
        raise refused(str(exc))


def _float(value, name: str, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise refused(f"{name} must be a number.")
    if not low <= number <= high:   # also refuses NaN
        raise refused(f"{name} must be between {low} and {high} (got {value}).")
    return number


def _scale(resolution: int) -> int:
    """Nearest-neighbour upscaling factor so a 28 px digit is not a speck in a GIF."""
    return max(1, 128 // resolution)


def _labelled(frame: np.ndarray, text: str) -> np.ndarray:
    """A frame with a caption band on top (PIL's built-in bitmap font: no font files needed)."""
    from PIL import Image, ImageDraw
    img = Image.fromarray(frame).convert("RGB")
    canvas = Image.new("RGB", (img.width, img.height + 14), "black")
    canvas.paste(img, (0, 14))
    ImageDraw.Draw(canvas).text((3, 2), text, fill="white")
    return np.asarray(canvas)


def _read_png(path: str) -> np.ndarray:
    """Pixels rather than a path: a run folder may be outside the paths Gradio serves."""
    from PIL import Image
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


def run_of(directory: str) -> RunDir | None:
    """The run directory behind a generator directory; the shipped asset has no grids/."""
    return RunDir(directory) if os.path.isdir(os.path.join(directory, "grids")) else None


# Returned files kept: more than can be in flight (app.py queues 4 at a time per event, and three
# events return files), since Gradio serves its own cached copy once a reply is sent.
KEEP_OUTPUTS = 16


class OutputFolders:
    """The files this tab returns, in one temp folder of this server, removed when it exits.

    Each file gets a subfolder of its own (two viewers may ask for the same name); only the
    newest KEEP_OUTPUTS are kept. An uploaded generator is kept until another one replaces it."""

    def __init__(self):
        self._root = None
        self._made = collections.deque()
        self._lock = threading.Lock()    # events run in worker threads

    def _folder(self) -> str:
        # Returned files must live under tempfile.gettempdir() (or cwd) for Gradio to serve them.
        if self._root is None or not os.path.isdir(self._root):
            self._root = tempfile.mkdtemp(prefix="blink-sample-")
            atexit.register(shutil.rmtree, self._root, True)   # True: ignore errors
        return self._root

    def path(self, name: str) -> str:
        """Where to write a file to return, in a new subfolder; the oldest beyond the limit go."""
        with self._lock:
            folder = tempfile.mkdtemp(dir=self._folder())
            self._made.append(folder)
            while len(self._made) > KEEP_OUTPUTS:
                shutil.rmtree(self._made.popleft(), ignore_errors=True)
        return os.path.join(folder, name)

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


def build(generator_dir, columns_default: int = 8, run_dir=None, require_host=None, host_key_set: bool = False,
          runs=None):
    """Lay out the Sample tab's contents; `generator_dir()` says which generator a viewer who follows
    the live run sees.

    run_dir: optional callable giving the current run's directory, for the timelapse of a run
    that has grids but no generator yet; without it the run is found from generator_dir().
    runs: optional callable listing the runs with a generator, newest first, that a viewer may pick.
    """
    runs = runs or list
    cache = GeneratorCache()
    directions: dict = {}                          # generator key -> (directions, explained ratio)
    upload = {"dir": None, "base": None, "name": ""}   # the server-wide override (see module doc)
    upload_lock = threading.Lock()
    outputs = OutputFolders()
    out_path = outputs.path
    timelapse_cache: dict = {}

    def followed_dir() -> str:
        """The generator of a viewer who follows the live run: the job's, or the host's upload."""
        base = generator_dir()
        with upload_lock:
            if upload["dir"] and upload["base"] == base and os.path.isdir(upload["dir"]):
                return upload["dir"]
            if upload["dir"]:          # a new run produced a generator: the upload gives way
                upload.update(dir=None, base=None, name="")
        return base

    def chosen_run(name: str) -> RunDir:
        for run in runs():
            if run.name == name:
                return run
        raise refused(f"There is no run {name} with a generator on this server (old runs are deleted to make "
                       "room): pick another, or tick 'Follow the live run'.", title="Generator not found")

    def current_dir() -> str:
        """The generator directory of this event's viewer (see for_viewer)."""
        view = _VIEWED.get()
        if view == FOLLOW:
            return followed_dir()
        return SHIPPED_GENERATOR if view == SHIPPED else chosen_run(view).path

    def current_run() -> RunDir | None:
        path = run_dir() if run_dir is not None else None
        return RunDir(path) if path else None

    def first_checkpoint(run: RunDir) -> str:
        """The step of a run's first generator (the trainer saves one with every checkpoint)."""
        try:
            config = run.read_config()
        except (OSError, ValueError):
            return "?"
        return str(min(config.checkpoint_every, config.steps))

    def describe(directory: str, meta: dict) -> str:
        """Which generator the captions show, in words: the shipped one, an upload, or run X at step N."""
        step, view = meta.get("step", "?"), _VIEWED.get()
        with upload_lock:
            uploaded = view == FOLLOW and directory == upload["dir"]
        if uploaded:
            return f"the uploaded generator (step {step}), chosen by the host for everyone"
        if directory == SHIPPED_GENERATOR:
            run = current_run() if view == FOLLOW else None
            if run is not None and not run.has_generator():
                return (f"run {run.name} has no generator yet (first at step {first_checkpoint(run)}); "
                        f"showing the shipped one (pre-trained, step {step})")
            return f"the shipped generator (pre-trained, step {step})"
        run = RunDir(directory)
        if view != FOLLOW:
            return f"run {run.name} at step {step} (your pick: others on this server may see another)"
        live = run.read_status().state not in FINAL_STATES
        return f"run {run.name} at step {step}" + (", the live run's newest checkpoint" if live else "")

    def run_choices() -> list[tuple[str, str]]:
        """The generator picker's entries: the shipped generator, then every run with one, newest first."""
        choices = [("The shipped generator (pre-trained)", SHIPPED)]
        for run in runs():
            try:
                spec, meta = sampling.read_spec(run.file("generator.json"))
            except sampling.GeneratorFileError:
                continue      # a damaged description: sampling from it would fail anyway
            gan = (meta.get("config") or {}).get("gan", "?")
            kind = f"{spec.classes} classes" if spec.classes else "unconditional"
            choices.append((f"{run.name}: step {meta.get('step', '?')}, {gan}, {kind}", run.name))
        return choices

    def asked_class(value, generator, name: str) -> int | None:
        """A class picker's value: None when the seed decides, else a class this generator has."""
        if value is None or str(value) in ("", SEED_CLASS):
            return None
        try:
            return sampling.check_class(generator, _int(value, name, 0, SEED_MAX))
        except ValueError as exc:
            raise refused(f"{name}: {exc}")

    def load():
        return cache.get_with_key(current_dir())

    def get_directions(generator, key):
        if key not in directions:
            _keep(directions, key, sampling.principal_directions(generator, k=N_DIRECTIONS))
        return directions[key]

    # ---- seeds --------------------------------------------------------------------------
    def _samples(seed, count, class_choice, most: int):
        seed, count = _int(seed, "Seed", 0, SEED_MAX), _int(count, "Count", 1, most)
        directory = current_dir()
        generator, meta = cache.get(directory)
        label = asked_class(class_choice, generator, "Class")
        images = sampling.generate(generator, sampling.latents(seed, count, generator.z_dim),
                                   sampling.class_labels(generator, seed, count, label))
        return images, (seed, count, label), generator, describe(directory, meta)

    def sample(seed, count, class_choice=SEED_CLASS):
        images, (seed, count, label), generator, source = _samples(seed, count, class_choice, MAX_GRID)
        caption = f"Generator: {source}. {count} samples, seed {seed}."
        if label is not None:
            caption += f" Every sample is class {label}."
        elif generator.classes:
            caption += (f" Class-conditional: each column is one class, starting from class "
                        f"{seed % generator.classes} (seed mod {generator.classes}).")
        return grid_image(images, columns=min(sampling.grid_columns(generator, columns_default), count)), caption

    def download_samples(seed, count, class_choice=SEED_CLASS):
        images, (seed, count, label), _, _ = _samples(seed, count, class_choice, MAX_ZIP)
        name = f"seed{seed}" + ("" if label is None else f"-class{label}")
        return sampling.write_samples_zip(images, out_path(f"blink-{name}-{count}.zip"), prefix=f"seed{seed}")

    def show(seed, count, class_choice):
        """Everything that depends on which generator the viewer sees: the follow box, the picker
        (its runs refreshed), the class pickers fitted to the generator, and a fresh grid."""
        view = _VIEWED.get()
        generator, _ = cache.get(current_dir())
        pickers = [_class_picker("Every class, one per column", generator.classes),
                   _class_picker("The seed's class", generator.classes),
                   _class_picker("The seed's class", generator.classes)]
        return (view == FOLLOW, gr.update(choices=run_choices(), value=None if view == FOLLOW else view), *pickers,
                *sample(seed, count, class_choice if generator.classes else SEED_CLASS))

    shown = for_viewer(show)

    def pick_generator(picked, seed=0, count=64, class_choice=SEED_CLASS):
        """The viewer picked a run (or the shipped generator): they stop following the live run."""
        view = str(picked or SHIPPED)
        return (view, *shown(view, seed, count, class_choice))

    def follow_live_run(follow, picked=None, seed=0, count=64, class_choice=SEED_CLASS):
        view = FOLLOW if follow else str(picked or SHIPPED)
        return (view, *shown(view, seed, count, class_choice))

    # ---- interpolation ------------------------------------------------------------------
    def _interpolation(seed_a, seed_b, steps, mode, class_a, class_b):
        seed_a, seed_b = _int(seed_a, "Seed A", 0, SEED_MAX), _int(seed_b, "Seed B", 0, SEED_MAX)
        steps = _int(steps, "Steps", 2, MAX_STRIP)
        if mode not in ("linear", "spherical"):
            raise refused("Interpolation must be 'linear' or 'spherical'.")
        generator, _ = cache.get(current_dir())
        class_a, class_b = asked_class(class_a, generator, "Class A"), asked_class(class_b, generator, "Class B")
        z = sampling.interpolation_latents(seed_a, seed_b, steps, generator.z_dim, mode)
        labels = sampling.blended_labels(generator, seed_a if class_a is None else class_a,
                                         seed_b if class_b is None else class_b, torch.linspace(0, 1, steps))
        return sampling.generate(generator, z, labels), (seed_a, seed_b, steps, mode)

    def interpolate(seed_a, seed_b, steps, mode, class_a=SEED_CLASS, class_b=SEED_CLASS):
        images, (_, _, steps, _) = _interpolation(seed_a, seed_b, steps, mode, class_a, class_b)
        return grid_image(images, columns=steps)

    def interpolation_gif(seed_a, seed_b, steps, mode, class_a=SEED_CLASS, class_b=SEED_CLASS):
        images, (a, b, steps, mode) = _interpolation(seed_a, seed_b, steps, mode, class_a, class_b)
        frames = list(to_uint8(images))
        frames = frames + frames[-2:0:-1]      # there and back, so the loop has no jump
        path = out_path(f"blink-{mode}-{a}-to-{b}.gif")
        write_atomic(path, gif_bytes(frames, duration_ms=90, scale=_scale(images.shape[-1])))
        return path, path

    # ---- directions, truncation and neighbours --------------------------------------------
    def _explored(seed, psi, amounts):
        seed = _int(seed, "Seed", 0, SEED_MAX)
        psi = _float(psi, "Truncation psi", 0.0, 2.0)
        amounts = [_float(a, f"Direction {i + 1}", -DIRECTION_RANGE, DIRECTION_RANGE) for i, a in enumerate(amounts)]
        (generator, meta), key = load()
        dirs, ratio = get_directions(generator, key)
        z = sampling.edit_latent(sampling.latents(seed, 1, generator.z_dim), dirs, amounts, psi)
        return sampling.generate(generator, z, sampling.seed_labels(generator, seed, 1))[0], meta, ratio, \
            (seed, psi, amounts)

    def explore(seed, psi, *amounts):
        image, meta, ratio, (seed, psi, amounts) = _explored(seed, psi, amounts)
        moved = ", ".join(f"PC{i + 1} {a:+.1f}" for i, a in enumerate(amounts) if a) or "no direction moved"
        share = ", ".join(f"{r:.0%}" for r in ratio.tolist())
        caption = (f"Seed {seed}, psi {psi:.2f}, {moved}. The 5 directions carry {share} of the first block's "
                   f"variance (step {meta.get('step', '?')}).")
        up = _scale(image.shape[-1])
        return grid_image(image[None], columns=1).repeat(up, 0).repeat(up, 1), caption

    def neighbours(seed, psi, k, *amounts):
        k = _int(k, "Neighbours", 1, MAX_NEIGHBOURS)
        image, _, _, _ = _explored(seed, psi, amounts)
        try:
            pool, dataset = training_pool(image.shape[-1], image.shape[0])
        except DatasetError as exc:   # e.g. the run's dataset is absent offline: its advice, not a blank failure
            raise refused(f"The training images are not available here. {exc}", title="No neighbours")
        except (OSError, RuntimeError):   # unreadable cache or files: no errno or server path for the page
            raise refused("The training images could not be read on this server.", title="No neighbours")
        idx, dist = sampling.nearest_neighbours(image, pool, min(k, len(pool)))
        real = to_model_range(pool[idx]).numpy()
        strip = grid_image(np.concatenate([image[None], real]), columns=len(idx) + 1)
        up = max(1, _scale(image.shape[-1]) // 2)
        caption = (f"Left: the generated image. Then its {len(idx)} nearest of {len(pool):,} {dataset} training images "
                   f"by pixel distance (L2: {', '.join(f'{d:.1f}' for d in dist)}). Near-copies would mean "
                   "memorisation.")
        return strip.repeat(up, 0).repeat(up, 1), caption

    pools: dict = {}
    pools_lock = threading.Lock()

    def shown_run_config():
        """The config the server wrote for the run whose generator is shown; None for the shipped
        or an uploaded generator (their metadata is never trusted to name files to read)."""
        run = run_of(current_dir())
        try:
            return run.read_config() if run else None
        except (OSError, ValueError, TypeError):
            return None

    def training_pool(resolution, channels):
        config = shown_run_config()
        key = (config.to_json() if config else None, resolution, channels)
        with pools_lock:   # one decode of a pool however many viewers ask at once
            if key not in pools:
                pools.clear()
                pools[key] = sampling.training_images(config, resolution, channels)
            return pools[key]

    # ---- timelapse -----------------------------------------------------------------------
    def _run() -> RunDir | None:
        """The run whose grids the viewer sees: the live one (even before its first generator), or the pick."""
        run = current_run() if _VIEWED.get() == FOLLOW else None
        if run is not None and os.path.isdir(os.path.join(run.path, "grids")):
            return run
        return run_of(current_dir())

    def _grids():
        run = _run()
        grids = run.grids() if run else []
        if not grids:
            raise refused("No training grids yet: the timelapse shows a run's fixed-noise grids "
                           "(the shipped generator has none).")
        return run, grids

    def timelapse():
        run, grids = _grids()
        if len(grids) > MAX_TIMELAPSE_FRAMES:   # even subsample, always keeping the newest
            keep = np.linspace(0, len(grids) - 1, MAX_TIMELAPSE_FRAMES).round().astype(int)
            grids = [grids[i] for i in sorted(set(keep))]
        key = (run.path, tuple(s for s, _ in grids))
        if timelapse_cache.get("key") != key or not os.path.exists(timelapse_cache.get("path", "")):
            frames = [_labelled(_read_png(p), f"step {s}") for s, p in grids]
            # Linger on the newest grid before looping (a long last frame: PIL merges repeated ones).
            path = out_path(f"{run.name}-timelapse.gif")
            write_atomic(path, gif_bytes(frames, duration_ms=[150] * (len(frames) - 1) + [1500]))
            timelapse_cache.update(key=key, path=path)
        newest_step, newest_path = run.grids()[-1]
        all_steps = [s for s, _ in run.grids()]
        slider = gr.Slider(minimum=all_steps[0], maximum=max(newest_step, all_steps[0] + 1), value=newest_step,
                           step=1, label="Grid at step", interactive=True)
        caption = f"{len(all_steps)} grids, step {all_steps[0]} to {newest_step} (run {run.name}); showing step {newest_step}."
        return timelapse_cache["path"], slider, _read_png(newest_path), caption

    def grid_at(step):
        step = _float(step, "Step", 0, 10**9)
        run, grids = _grids()
        chosen, path = min(grids, key=lambda g: (abs(g[0] - step), -g[0]))   # nearest logged grid
        return _read_png(path), f"Grid at step {chosen} (of {len(grids)} logged, newest {grids[-1][0]})."

    # ---- generator files -------------------------------------------------------------------
    def download():
        directory = current_dir()
        files = [os.path.join(directory, n) for n in ("generator.safetensors", "generator.json")]
        if not all(os.path.exists(f) for f in files):
            raise refused("No generator has been saved yet.")
        # Copied into this tab's own output folder: Gradio serves only files under the temp folder
        # or the app's folder, and BLINK_RUNS_DIR may be anywhere (a /data disk, a private TMPDIR).
        copies = []
        for path in files:
            copy = out_path(os.path.basename(path))
            shutil.copyfile(path, copy)
            copies.append(copy)
        return copies

    def upload_generator(files, key=""):
        if require_host:   # the generator everyone on the server samples from: the host's to change
            require_host(key)
        paths = [f if isinstance(f, str) else getattr(f, "name", None) for f in (files or [])]
        weights = [p for p in paths if p and p.lower().endswith(".safetensors")]
        metas = [p for p in paths if p and p.lower().endswith(".json")]
        if len(weights) != 1 or len(metas) != 1 or len(paths) != 2:
            raise refused("Upload exactly two files: generator.safetensors and generator.json "
                           "(pickles such as .pt/.pth/.ckpt are never loaded).", title="Upload refused")
        for path, limit in ((weights[0], sampling.MAX_WEIGHTS_MB * 2**20), (metas[0], sampling.MAX_META_BYTES)):
            if os.path.getsize(path) > limit:   # before hashing or copying anything big
                raise refused(f"{os.path.basename(path)} is too large ({os.path.getsize(path):,} bytes; "
                               f"limit {limit:,}).", title="Upload refused")
        try:    # every check (header, spec, strict shapes, finite values) before it is used
            generator, meta = sampling.load_generator(weights[0], metas[0])
        except sampling.GeneratorFileError as exc:
            raise refused(str(exc), title="Upload refused")
        digest = hashlib.sha256()
        for path in (weights[0], metas[0]):
            with open(path, "rb") as f:
                digest.update(f.read())
        kept = outputs.upload_folder(digest.hexdigest()[:16])
        shutil.copyfile(weights[0], os.path.join(kept, "generator.safetensors"))
        shutil.copyfile(metas[0], os.path.join(kept, "generator.json"))
        cache.get(kept)                    # load the kept copy now, so a bad copy fails here
        with upload_lock:
            upload.update(dir=kept, base=generator_dir(), name=os.path.basename(weights[0]))
        spec = generator.spec
        return (f"Using the uploaded generator ({spec.channels}x{spec.resolution}x{spec.resolution}, z {spec.z_dim}, "
                f"width {spec.width}, step {meta.get('step', '?')}) for everyone on this server, until a new run "
                "saves a generator or you switch back.")

    def use_run_generator(key=""):
        if require_host:
            require_host(key)
        with upload_lock:
            upload.update(dir=None, base=None, name="")
        return f"Using the run's generator ({os.path.basename(generator_dir().rstrip(os.sep))})."

    # ---- layout ------------------------------------------------------------------------------
    view = gr.State(FOLLOW)    # this viewer's generator: FOLLOW, SHIPPED or a run's name
    with gr.Row():
        follow = gr.Checkbox(value=True, label="Follow the live run",
                             info="its newest checkpoint each time you sample (the shipped generator until it has one)")
        # Custom values are allowed because the runs change after the page was built; the
        # handlers accept only the runs on this server.
        pick = gr.Dropdown([("The shipped generator (pre-trained)", SHIPPED)], value=None, allow_custom_value=True,
                           label="Or pick a generator", info="runs on this server that saved one, newest first")
    with gr.Row():
        seed = gr.Number(value=0, precision=0, label="Seed", minimum=0)
        count = gr.Slider(1, MAX_GRID, value=64, step=1, label="Count")
        digit = gr.Dropdown([("Every class, one per column", SEED_CLASS)], value=SEED_CLASS, allow_custom_value=True,
                            label="Class", info="of a class-conditional generator")
        sample_button = gr.Button("Sample", variant="primary")
        zip_button = gr.Button("Download samples (zip of PNGs)")
    caption = gr.Markdown(elem_id="sample-caption")
    grid = gr.Image(label="Samples", format="png", type="numpy", interactive=False, elem_id="sample-grid")
    samples_zip = gr.File(label="Samples (zip)")

    with gr.Accordion("Interpolate between two seeds", open=True):
        with gr.Row():
            seed_a = gr.Number(value=1, precision=0, label="Seed A", minimum=0)
            seed_b = gr.Number(value=2, precision=0, label="Seed B", minimum=0)
            strip_steps = gr.Slider(2, MAX_STRIP, value=10, step=1, label="Steps")
            mode = gr.Radio(["linear", "spherical"], value="spherical", label="Interpolation")
            class_a, class_b = [gr.Dropdown([("The seed's class", SEED_CLASS)], value=SEED_CLASS, allow_custom_value=True,
                                            label=f"Class {end}", info="morph one class into another")
                                for end in "AB"]
            interpolate_button = gr.Button("Interpolate")
            gif_button = gr.Button("Make GIF")
        strip = gr.Image(label="Interpolation", format="png", type="numpy", interactive=False)
        with gr.Row():
            gif_preview = gr.Image(label="Interpolation (animated)", type="filepath", interactive=False)
            gif_file = gr.File(label="Interpolation GIF")

    with gr.Accordion("Directions, truncation and nearest real images", open=True):
        gr.Markdown("Five directions found by PCA of the generator's first-layer features (GANSpace), "
                    "in standard deviations of the latent. Psi < 1 pulls the latent toward the mean: "
                    "more typical, less varied.")
        with gr.Row():
            explore_seed = gr.Number(value=0, precision=0, label="Explore seed", minimum=0)
            psi = gr.Slider(0.0, 2.0, value=1.0, step=0.05, label="Truncation psi")
            k = gr.Slider(1, MAX_NEIGHBOURS, value=6, step=1, label="Neighbours")
        sliders = [gr.Slider(-DIRECTION_RANGE, DIRECTION_RANGE, value=0.0, step=0.1, label=f"Direction {i + 1}")
                   for i in range(N_DIRECTIONS)]
        with gr.Row():
            explore_button = gr.Button("Render")
            reset_button = gr.Button("Reset directions")
            neighbours_button = gr.Button("Nearest real images")
        with gr.Row():
            explored = gr.Image(label="Explored image", format="png", type="numpy", interactive=False)
            neighbour_strip = gr.Image(label="Nearest training images", format="png", type="numpy", interactive=False)
        explore_caption = gr.Markdown()
        neighbour_caption = gr.Markdown()

    with gr.Accordion("Training timelapse", open=False):
        gr.Markdown("The run's fixed-noise grids, oldest to newest, playing as a loop (a GIF: its download "
                    "button keeps it; no MP4, that would need ffmpeg). The slider stops at one step.")
        timelapse_button = gr.Button("Load timelapse")
        timelapse_caption = gr.Markdown()
        with gr.Row():
            timelapse_gif = gr.Image(label="Timelapse (animated)", type="filepath", interactive=False)
            with gr.Column():
                step_slider = gr.Slider(0, 1, value=1, step=1, label="Grid at step")
                step_grid = gr.Image(label="Grid at the chosen step", format="png", type="numpy", interactive=False)

    with gr.Accordion("Generator files", open=False):
        with gr.Row():
            download_button = gr.Button("Download generator")
            files = gr.File(label="Generator (safetensors + config JSON)", file_count="multiple")
        with gr.Row():
            uploaded = gr.File(label="Upload a generator (generator.safetensors + generator.json)",
                               file_count="multiple", file_types=[".safetensors", ".json"], type="filepath")
            upload_button = gr.Button("Use uploaded generator")
            back_button = gr.Button("Use the run's generator")
        generator_key = gr.Textbox(label="Host key (the generator is shared by everyone on this server)",
                                   type="password", value="", visible=host_key_set)
        upload_status = gr.Markdown()

    # ---- events --------------------------------------------------------------------------------
    # Every handler that samples runs for_viewer: its first input is the viewer's choice.
    sample_inputs = [view, seed, count, digit]
    sample_button.click(for_viewer(sample), sample_inputs, [grid, caption], api_name="sample")
    digit.input(for_viewer(sample), sample_inputs, [grid, caption], api_visibility="private")
    shown_outputs = [follow, pick, digit, class_a, class_b, grid, caption]
    pick.input(pick_generator, [pick, seed, count, digit], [view, *shown_outputs], api_name="choose_generator")
    follow.input(follow_live_run, [follow, pick, seed, count, digit], [view, *shown_outputs],
                 api_name="follow_live_run")
    zip_button.click(for_viewer(download_samples), sample_inputs, samples_zip, api_name="download_samples")
    interpolation_inputs = [view, seed_a, seed_b, strip_steps, mode, class_a, class_b]
    interpolate_button.click(for_viewer(interpolate), interpolation_inputs, strip, api_name="interpolate")
    gif_button.click(for_viewer(interpolation_gif), interpolation_inputs, [gif_preview, gif_file],
                     api_name="interpolation_gif")
    explore_for_viewer = for_viewer(explore)
    explore_inputs = [view, explore_seed, psi, *sliders]
    explore_outputs = [explored, explore_caption]
    explore_button.click(explore_for_viewer, explore_inputs, explore_outputs, api_name="explore")
    explore_seed.submit(explore_for_viewer, explore_inputs, explore_outputs, api_visibility="private")
    # .release, not .change: one render when the student lets go, not one per tick of a drag.
    for slider in [psi, *sliders]:
        slider.release(explore_for_viewer, explore_inputs, explore_outputs, api_visibility="private",
                       trigger_mode="always_last")
    reset_button.click(lambda: [0.0] * N_DIRECTIONS, None, sliders, api_visibility="private").then(
        explore_for_viewer, explore_inputs, explore_outputs, api_visibility="private")
    neighbours_button.click(for_viewer(neighbours), [view, explore_seed, psi, k, *sliders],
                            [neighbour_strip, neighbour_caption], api_name="neighbours")
    timelapse_button.click(for_viewer(timelapse), view, [timelapse_gif, step_slider, step_grid, timelapse_caption],
                           api_name="timelapse")
    step_slider.release(for_viewer(grid_at), [view, step_slider], [step_grid, timelapse_caption], api_name="grid_at",
                        trigger_mode="always_last")
    download_button.click(for_viewer(download), view, files, api_name="download_generator")
    upload_button.click(upload_generator, [uploaded, generator_key], upload_status, api_name="upload_generator")
    back_button.click(use_run_generator, generator_key, upload_status, api_name="use_run_generator")

    def show_on(triggers) -> None:
        """Refresh what depends on the viewer's generator on these events (page open, tab opened, run end)."""
        gr.on(triggers, shown, sample_inputs, shown_outputs, api_visibility="private", show_progress="hidden")

    return {"grid": grid, "sample": sample, "seed": seed, "count": count, "caption": caption, "show_on": show_on,
            "explore": explore, "neighbours": neighbours, "timelapse": timelapse, "grid_at": grid_at,
            "upload_generator": upload_generator, "current_dir": current_dir}
