"""The run directory: the one contract between a trainer and everyone who watches it.

    runs/<run-id>/
      config.json              the run's plan (core/plan.py), made where it was asked for: the config as
                               asked and as it trains, and what its device and data made of it
      status.json              core/status.py's Status: state, message, step, pid, ... (replaced atomically)
      events.jsonl             one JSON object per logged step (append-only)
      grids/step_000100.png    fixed-noise sample grids, one per grid step, never overwritten
      checkpoint.pt            G, D, optimizers, scalers, step, config, and G_ema (the moving average
                               of G's weights) when config.ema > 0 (atomic)
      generator.safetensors    the generator's weights, loadable without pickle: G_ema's when
                               config.ema > 0 (what the grids show), else G's
      generator.json           what is needed to rebuild it (spec, config, step)
      control.json             the pending request to the trainer: pause / resume / step
      stop.json                a pending Stop, a file of its own: no later request replaces it
      settings.json            a settings change the host asked for while the run trains
      cpu_threads.json         the CPU threads the trainer may use: its share while a comparison
                               trains beside it (app/compare.py), 0 for all of them again

The trainer writes, readers never lock: they tolerate a half-written last event line. A
request is a file rather than an in-memory Event so that a restarted UI, or a CLI user in
another terminal, can stop or pause a run it did not start.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import time
from dataclasses import replace
from typing import Any

from core.files import write_atomic
from core.images import grid_image, png_bytes
from core.status import Status

STATES = ("preparing", "waiting", "starting", "compiling", "running", "paused", "done", "stopped", "failed")
FINAL_STATES = ("done", "stopped", "failed")
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
REQUEST_FILE, STOP_FILE = "control.json", "stop.json"   # RunDir.request
STEP_UPDATES = ("both", "d", "g")   # what a Step may train: both nets, or D or G alone
SETTINGS_FILE = "settings.json"   # RunDir.change_settings: what the host changed while the run trains
CPU_THREADS_FILE = "cpu_threads.json"   # RunDir.share_cpu: the trainer's share of the CPU


# A generator's two files, in a run directory and in any folder that holds one (the shipped
# generator, an upload): the weights (safetensors, no pickle) and their JSON description.
GENERATOR_FILES = ("generator.safetensors", "generator.json")


def generator_files(directory: str) -> tuple[str, str]:
    """(weights, description) paths of the generator in `directory`."""
    weights, meta = (os.path.join(directory, name) for name in GENERATOR_FILES)
    return weights, meta


def default_root() -> str:
    return os.environ.get("BLINK_RUNS_DIR", os.path.join(os.getcwd(), "runs"))


class DiskRefused(OSError):
    """A write the disk refused (full, read-only, no permission); str() says what to do, in plain words."""


def runs_folder_name(folder: str) -> str:
    """A runs folder as the user named it: BLINK_RUNS_DIR as typed, else relative to here."""
    configured = os.environ.get("BLINK_RUNS_DIR")
    if configured and os.path.abspath(configured) == os.path.abspath(folder):
        return configured
    relative = os.path.relpath(folder)
    return folder if relative.startswith("..") else relative


def disk_refusal(exc: OSError, folder: str, needed_bytes: int = 0, name: str = "",
                 setting: str = "BLINK_RUNS_DIR") -> DiskRefused | None:
    """The plain message for a write into `folder` that the disk refused; None for other errors.

    name: what to call the folder (default: the runs folder, as configured); setting: the
    environment variable that moves it."""
    name = name or f"the runs folder {runs_folder_name(folder)}"
    if exc.errno in DISK_FULL:
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            free = 0
        # Room for this write and the run's next ones: a checkpoint is replaced only after its new
        # copy is complete (old and new are on the disk together), and the generator comes beside it.
        short_mb = max(1, math.ceil((3 * needed_bytes - free) / 2**20))
        return DiskRefused(f"The disk is full: free {short_mb} MB in {name} (delete old runs or other files "
                           f"you no longer need on that disk), or point {setting} at a bigger disk")
    if exc.errno in NOT_WRITABLE:
        return DiskRefused(f"{name[:1].upper()}{name[1:]} is not writable (a read-only disk, or no permission): "
                           f"make it writable, or point {setting} at a folder that is")
    return None


def writable_problem(root: str) -> str:
    """Why runs cannot be written under root (read-only, no permission), or "" if they can. Writes
    nothing: it asks the nearest folder that exists, which is where root would be created."""
    folder = os.path.abspath(root)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if os.access(folder, os.W_OK | os.X_OK):
        return ""
    return str(disk_refusal(OSError(errno.EACCES, "not writable"), root))


def pid_alive(pid: int | None) -> bool:
    """True if a process with this pid runs (a zombie, exited but not yet reaped, does not)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class RunDir:
    # The run's files, and its grids' folder (the module docstring says what each holds).
    CONFIG, STATUS, EVENTS, HEARTBEAT = "config.json", "status.json", "events.jsonl", "heartbeat.json"
    CHECKPOINT, GRIDS = "checkpoint.pt", "grids"
    REAL_GRID = "real.png"   # in GRIDS, beside the fakes' grids (grid_name)

    def __init__(self, path: str):
        self.path = os.path.abspath(path)

    # ---- creation -------------------------------------------------------------------
    @classmethod
    def create(cls, plan, root: str | None = None, path: str | None = None) -> "RunDir":
        """A new run folder holding `plan` (core.plan.Plan), the run's one record: at `path` (the
        CLI's --run-dir), else under root, named by its time, GAN type and dataset."""
        root = root or default_root()
        given = path is not None
        if not given:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            base = os.path.join(root, f"{stamp}-{plan.config.gan}-{plan.config.dataset}")
            path, n = base, 1
            while os.path.exists(path):
                n += 1
                path = f"{base}-{n}"
        try:
            os.makedirs(os.path.join(path, cls.GRIDS), exist_ok=given)
        except OSError as exc:
            raise disk_refusal(exc, root) or exc
        run = cls(path)
        run.write_plan(plan)
        run.write_status("starting", "Starting the trainer...")
        return run

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def grids_folder(self) -> str:
        return self.file(self.GRIDS)

    @staticmethod
    def grid_name(step: int, kind: str = "png") -> str:
        """The file in GRIDS of the grid drawn at `step` (png), or of D's verdicts on it (json)."""
        return f"step_{step:06d}.{kind}"

    def _refused(self, exc: OSError, needed_bytes: int = 0) -> OSError:
        """The error to raise for a failed write: in plain words when the disk refused it."""
        return disk_refusal(exc, os.path.dirname(self.path), needed_bytes) or exc

    def _write(self, name: str, data: bytes) -> None:
        try:
            write_atomic(self.file(name), data)
        except OSError as exc:
            raise self._refused(exc, len(data))

    def remove_stale_temp_files(self) -> list[str]:
        """Remove what killed writes left (write_atomic's `NAME.tmpPID-THREAD` of a process that is gone);
        the names removed. A live writer's temp file is left alone."""
        removed = []
        for folder in (self.path, self.grids_folder):
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                match = re.fullmatch(r".+\.tmp(\d+)(-\d+)?", name)
                if match and not pid_alive(int(match.group(1))):
                    try:
                        os.remove(os.path.join(folder, name))
                        removed.append(name)
                    except OSError:
                        pass
        return removed

    # ---- config ---------------------------------------------------------------------
    def write_plan(self, plan) -> None:
        self._write(self.CONFIG, json.dumps(plan.to_dict(), indent=2, sort_keys=True).encode())

    def read_plan(self):
        """The run's core.plan.Plan; ValueError for a folder of an older Blink, OSError for none."""
        from core.plan import Plan
        with open(self.file(self.CONFIG)) as f:
            return Plan.from_dict(json.load(f))

    def read_config(self):
        """The run's TrainConfig as it trains (its plan's)."""
        return self.read_plan().config

    # ---- status ---------------------------------------------------------------------
    def write_status(self, state: str, message: str = "", **fields: Any) -> None:
        """Replace state and message, and the given Status fields; the others keep their values."""
        assert state in STATES, state
        status = replace(self.read_status(), **fields, state=state, message=message, updated=time.time())
        self._write(self.STATUS, json.dumps(status.to_dict()).encode())

    def write_heartbeat(self, beat: dict) -> None:
        """The trainer's pulse (core/heartbeat.py), written by a thread of its own every second."""
        self._write(self.HEARTBEAT, json.dumps(beat).encode())

    def read_heartbeat(self) -> dict:
        """The trainer's last beat; {} before its first or when unreadable."""
        try:
            with open(self.file(self.HEARTBEAT)) as f:
                beat = json.load(f)
        except (OSError, ValueError):
            return {}
        return beat if isinstance(beat, dict) else {}

    def read_status(self) -> Status:
        """The run's status; an empty Status (state "") when none is written or the file is unreadable."""
        try:
            with open(self.file(self.STATUS)) as f:
                values = json.load(f)
        except (OSError, ValueError):
            return Status()
        return Status.from_dict(values) if isinstance(values, dict) else Status()

    # ---- events ---------------------------------------------------------------------
    def append_event(self, event: dict) -> None:
        # One write() of one line: appends of a few hundred bytes are not interleaved. A line a
        # full disk took only part of is cut off again, so the next line does not continue it.
        line = (json.dumps(event, allow_nan=True) + "\n").encode()
        try:
            with open(self.file(self.EVENTS), "ab", buffering=0) as f:
                end = f.seek(0, os.SEEK_END)
                try:
                    if f.write(line) != len(line):
                        raise OSError(errno.ENOSPC, "only part of the line was written")
                except OSError:
                    f.truncate(end)
                    raise
        except OSError as exc:
            raise self._refused(exc, len(line))

    def read_events(self, offset: int = 0) -> tuple[list[dict], int]:
        """Events from byte offset on, and the offset after the last complete line."""
        try:
            with open(self.file(self.EVENTS), "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return [], offset
        end = data.rfind(b"\n") + 1          # a half-written last line waits for the next read
        events = []
        for line in data[:end].splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:   # blank, or cut short by a crash mid-write: one point lost, not the view
                continue
        return events, offset + end

    def events_identity(self) -> int | None:
        """Which events file this is (its inode; None before the first event): trim_events writes
        a new one, so a reader that follows the file by its offset knows to read it from the start."""
        try:
            return os.stat(self.file(self.EVENTS)).st_ino
        except OSError:
            return None

    def trim_events(self, step: int) -> None:
        """Before a resume from the checkpoint at `step`: drop events logged after it (a killed or
        diverged session logs past its last checkpoint), so the resumed curve continues without
        repeated or NaN points. Atomic: readers see the old or the new file."""
        events, _ = self.read_events(0)
        kept = [e for e in events if e.get("step", 0) <= step]
        if len(kept) != len(events):
            self._write(self.EVENTS, "".join(json.dumps(e, allow_nan=True) + "\n" for e in kept).encode())

    # ---- grids ----------------------------------------------------------------------
    def save_grid(self, images, step: int, columns: int = 8) -> str:
        name = os.path.join(self.GRIDS, self.grid_name(step))
        self._write(name, png_bytes(grid_image(images, columns)))
        return self.file(name)

    def save_verdicts(self, step: int, verdicts: dict) -> None:
        """D's verdicts on the grid of `step` (core/train.py Loop.save_grid), beside its PNG."""
        self._write(os.path.join(self.GRIDS, self.grid_name(step, "json")), json.dumps(verdicts).encode())

    def has_grid(self, step: int) -> bool:
        return os.path.exists(os.path.join(self.grids_folder, self.grid_name(step)))

    def read_verdicts(self, step: int) -> dict | None:
        try:
            with open(self.file(os.path.join(self.GRIDS, self.grid_name(step, "json")))) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def save_real_grid(self, images, columns: int) -> None:
        """The real images D's verdicts are shown on beside the fakes (grids/real.png)."""
        self._write(os.path.join(self.GRIDS, self.REAL_GRID), png_bytes(grid_image(images, columns)))

    def has_real_grid(self) -> bool:
        return os.path.exists(os.path.join(self.grids_folder, self.REAL_GRID))

    def grids(self) -> list[tuple[int, str]]:
        """(step, path) of every grid, oldest first."""
        folder = self.grids_folder
        try:
            names = sorted(n for n in os.listdir(folder) if n.startswith("step_") and n.endswith(".png"))
        except OSError:
            return []
        return [(int(n[5:-4]), os.path.join(folder, n)) for n in names]

    # ---- checkpoints ----------------------------------------------------------------
    def save_checkpoint(self, state: dict) -> None:
        import io
        import torch
        buffer = io.BytesIO()
        torch.save(state, buffer)
        self._write(self.CHECKPOINT, buffer.getvalue())

    def load_checkpoint(self) -> dict:
        import torch
        return torch.load(self.file(self.CHECKPOINT), map_location="cpu", weights_only=False)

    def has_checkpoint(self) -> bool:
        return os.path.exists(self.file(self.CHECKPOINT))

    def save_generator(self, state_dict: dict, meta: dict) -> None:
        """Weights as safetensors (no pickle: safe to share) plus their JSON description."""
        from safetensors.torch import save as save_safetensors
        weights, description = GENERATOR_FILES
        self._write(weights, save_safetensors(state_dict))
        self._write(description, json.dumps(meta, indent=2).encode())

    def has_generator(self) -> bool:
        return all(os.path.exists(path) for path in generator_files(self.path))

    # ---- control requests -----------------------------------------------------------
    # One request is pending at a time and a later press replaces it, with two exceptions:
    #
    #   pending   pressed                 outcome
    #   stop      stop                    stop (asked again)
    #   stop      pause, resume, step     stop kept: the run is ending, the press comes too late
    #   step      resume, step            step kept: its grid comes first (the trainer's Pause ends it)
    #   step      pause                   pause: the run stays paused (the trainer writes it once stepped)
    #   pause     step                    step (Job.request asks it only of a paused run)
    #   pause     resume                  resume: a paused run goes on; one that had not yet heard the
    #                                     Pause never pauses (a Resume reads as "run" to it)
    #   resume    pause                   pause: the later press wins
    #   any       stop                    stop
    #
    # A Stop is a file of its own that no other request's write replaces: a Pause read-then-written
    # in the same instant (another thread, the trainer's own Pause after a Step) cannot lose it.
    def request(self, action: str, count: int = 0, updates: str = "both") -> str:
        """Ask the trainer to stop, pause or resume, or, while paused, to step `count` generator
        updates (of both nets, or of D or G alone: `updates`); it reads this between steps. Returns
        "" when asked, else the pending request that keeps its place (nothing is written)."""
        assert action in ("stop", "pause", "resume", "step"), action
        if action == "stop":
            self._write(STOP_FILE, json.dumps({"action": "stop", "time": time.time()}).encode())
            return ""
        pending = self.read_request()
        if pending == "stop" or (pending == "step" and action in ("resume", "step")):
            return pending
        self._write(REQUEST_FILE, json.dumps({"action": action, "time": time.time(), "count": count,
                                              "updates": updates}).encode())
        return ""

    def change_settings(self, values: dict) -> None:
        """Ask the trainer to train on with `values` (core.config.LIVE_FIELDS, checked by the
        caller): it reads them between steps, as it reads a request, and applies each change once.
        A change asked before the trainer took the last one joins it (a field asked twice: the newer
        value), so two quick presses both take effect."""
        pending = self.read_settings().get("values", {})
        self._write(SETTINGS_FILE, json.dumps({"values": {**pending, **values}, "time": time.time()}).encode())

    def read_settings(self) -> dict:
        """The last settings change asked for: {"values": {...}, "time": t}, or {} if none."""
        asked = self._read_json_object(SETTINGS_FILE)
        return asked if isinstance(asked.get("values"), dict) else {}

    def clear_settings(self, asked_at: float) -> None:
        """The change asked at `asked_at` is taken: its file goes, but not a newer one written since."""
        if self.read_settings().get("time") == asked_at:
            try:
                os.remove(self.file(SETTINGS_FILE))
            except OSError:
                pass

    def share_cpu(self, threads: int) -> None:
        """Ask the trainer to use `threads` CPU threads from its first step, or its next log step
        (0: all of them, as it started): the share a run gets while another trains beside it on the
        same CPU. The job clears it when the trainer ends (clear_cpu_share)."""
        self._write(CPU_THREADS_FILE, json.dumps({"threads": int(threads), "time": time.time()}).encode())

    def clear_cpu_share(self) -> None:
        """No share asked: the run's trainer, or its next session, uses every thread."""
        try:
            os.remove(self.file(CPU_THREADS_FILE))
        except OSError:
            pass

    def read_cpu_share(self) -> tuple[int, float] | None:
        """(threads, when asked) of the last share_cpu, or None if none was asked."""
        asked = self._read_json_object(CPU_THREADS_FILE)
        threads = asked.get("threads")
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
            return None
        return threads, asked.get("time", 0.0)

    def _read_json_object(self, name: str) -> dict:
        """A small JSON object the app writes for the trainer; {} when there is none (or a hand-made
        file holds something else)."""
        try:
            with open(self.file(name)) as f:
                value = json.load(f)
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def read_step_updates(self) -> str:
        """Which nets a step request trains: "both", "d" or "g"."""
        updates = self._read_json_object(REQUEST_FILE).get("updates", "both")
        return updates if updates in STEP_UPDATES else "both"

    def read_step_count(self) -> int:
        """How many generator updates a step request asks for (0 if none)."""
        request = self._read_json_object(REQUEST_FILE)
        return int(request.get("count", 0)) if request.get("action") == "step" else 0

    def read_request(self) -> str:
        """The pending request: "stop" while a Stop is, whatever came after it; "" when none."""
        if os.path.exists(self.file(STOP_FILE)):
            return "stop"
        return self._read_json_object(REQUEST_FILE).get("action", "")

    def clear_request(self, action: str = "") -> None:
        """Remove the pending requests (acted on, or the run ended). With `action` (a Resume the
        trainer heard): only a pending request of that kind, never a Stop pressed meanwhile."""
        if action and self._read_json_object(REQUEST_FILE).get("action") != action:
            return
        for name in (REQUEST_FILE,) if action else (REQUEST_FILE, STOP_FILE):
            try:
                os.remove(self.file(name))
            except OSError:
                pass


def list_runs(root: str | None = None) -> list[RunDir]:
    """Runs under root, newest first."""
    root = root or default_root()
    try:
        names = sorted(os.listdir(root), reverse=True)
    except OSError:
        return []
    return [RunDir(os.path.join(root, n)) for n in names if os.path.exists(os.path.join(root, n, RunDir.CONFIG))]
