"""The run directory: the one contract between a trainer and everyone who watches it.

    runs/<run-id>/
      config.json              the validated TrainConfig
      status.json              state, message, step, pid, device, ... (replaced atomically)
      events.jsonl             one JSON object per logged step (append-only)
      grids/step_000100.png    fixed-noise sample grids, one per grid step, never overwritten
      checkpoint.pt            G, D, optimizers, scalers, step, config (atomic)
      generator.safetensors    the generator's weights, loadable without pickle
      generator.json           what is needed to rebuild it (spec, config, step)
      control.json             requests to the trainer: stop / pause / resume

The trainer writes, readers never lock: they tolerate a half-written last event line. A
request is a file rather than an in-memory Event so that a restarted UI, or a CLI user in
another terminal, can stop or pause a run it did not start.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

STATES = ("starting", "compiling", "running", "paused", "done", "stopped", "failed")
FINAL_STATES = ("done", "stopped", "failed")


def default_root() -> str:
    return os.environ.get("BLINK_RUNS_DIR", os.path.join(os.getcwd(), "runs"))


def write_atomic(path: str, data: bytes) -> None:
    """Write to a temp file in the same folder, then rename: readers see old or new, never half."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def grid_image(images, columns: int = 8, padding: int = 2) -> np.ndarray:
    """(N, C, H, W) floats in [-1, 1] -> one uint8 tiled image: (H', W') grey or (H', W', 3) colour."""
    x = np.asarray(images, dtype=np.float32)
    n, c, h, w = x.shape
    rows = -(-n // columns)
    canvas = np.zeros((rows * (h + padding) + padding, columns * (w + padding) + padding, c), np.uint8)
    pixels = ((np.clip(x, -1, 1) + 1) * 127.5).round().astype(np.uint8).transpose(0, 2, 3, 1)
    for i in range(n):
        r, col = divmod(i, columns)
        y0, x0 = padding + r * (h + padding), padding + col * (w + padding)
        canvas[y0:y0 + h, x0:x0 + w] = pixels[i]
    return canvas[..., 0] if c == 1 else canvas


def png_bytes(image: np.ndarray) -> bytes:
    import io
    from PIL import Image
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


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
    def __init__(self, path: str):
        self.path = os.path.abspath(path)

    # ---- creation -------------------------------------------------------------------
    @classmethod
    def create(cls, config, root: str | None = None) -> "RunDir":
        root = root or default_root()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = os.path.join(root, f"{stamp}-{config.gan}-{config.dataset}")
        path, n = base, 1
        while os.path.exists(path):
            n += 1
            path = f"{base}-{n}"
        os.makedirs(os.path.join(path, "grids"))
        run = cls(path)
        run.write_config(config)
        run.write_status("starting", "Starting the trainer...")
        return run

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    # ---- config ---------------------------------------------------------------------
    def write_config(self, config) -> None:
        write_atomic(self.file("config.json"), config.to_json().encode())

    def read_config(self):
        from core.config import TrainConfig
        with open(self.file("config.json")) as f:
            return TrainConfig.from_json(f.read())

    # ---- status ---------------------------------------------------------------------
    def write_status(self, state: str, message: str = "", **fields: Any) -> None:
        assert state in STATES, state
        status = {**self.read_status(), **fields, "state": state, "message": message, "updated": time.time()}
        write_atomic(self.file("status.json"), json.dumps(status).encode())

    def read_status(self) -> dict:
        try:
            with open(self.file("status.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    # ---- events ---------------------------------------------------------------------
    def append_event(self, event: dict) -> None:
        # One write() of one line: appends of a few hundred bytes are not interleaved.
        with open(self.file("events.jsonl"), "a") as f:
            f.write(json.dumps(event, allow_nan=True) + "\n")

    def read_events(self, offset: int = 0) -> tuple[list[dict], int]:
        """Events from byte offset on, and the offset after the last complete line."""
        try:
            with open(self.file("events.jsonl"), "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return [], offset
        end = data.rfind(b"\n") + 1          # a half-written last line waits for the next read
        events = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        return events, offset + end

    # ---- grids ----------------------------------------------------------------------
    def save_grid(self, images, step: int, columns: int = 8) -> str:
        path = os.path.join(self.path, "grids", f"step_{step:06d}.png")
        write_atomic(path, png_bytes(grid_image(images, columns)))
        return path

    def grids(self) -> list[tuple[int, str]]:
        """(step, path) of every grid, oldest first."""
        folder = os.path.join(self.path, "grids")
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
        write_atomic(self.file("checkpoint.pt"), buffer.getvalue())

    def load_checkpoint(self) -> dict:
        import torch
        return torch.load(self.file("checkpoint.pt"), map_location="cpu", weights_only=False)

    def save_generator(self, state_dict: dict, meta: dict) -> None:
        """Weights as safetensors (no pickle: safe to share) plus their JSON description."""
        from safetensors.torch import save as save_safetensors
        write_atomic(self.file("generator.safetensors"), save_safetensors(state_dict))
        write_atomic(self.file("generator.json"), json.dumps(meta, indent=2).encode())

    def has_generator(self) -> bool:
        return os.path.exists(self.file("generator.safetensors")) and os.path.exists(self.file("generator.json"))

    # ---- control requests -----------------------------------------------------------
    def request(self, action: str) -> None:
        """Ask the trainer to stop, pause or resume; it reads this between steps."""
        assert action in ("stop", "pause", "resume"), action
        write_atomic(self.file("control.json"), json.dumps({"action": action, "time": time.time()}).encode())

    def read_request(self) -> str:
        try:
            with open(self.file("control.json")) as f:
                return json.load(f).get("action", "")
        except (OSError, ValueError):
            return ""

    def clear_request(self) -> None:
        try:
            os.remove(self.file("control.json"))
        except OSError:
            pass


def list_runs(root: str | None = None) -> list[RunDir]:
    """Runs under root, newest first."""
    root = root or default_root()
    try:
        names = sorted(os.listdir(root), reverse=True)
    except OSError:
        return []
    return [RunDir(os.path.join(root, n)) for n in names if os.path.exists(os.path.join(root, n, "config.json"))]
