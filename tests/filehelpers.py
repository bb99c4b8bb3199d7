"""Helpers several test folders share: small files made on the spot, a real small tmpfs."""
from __future__ import annotations

import glob
import io
import json
import os
import subprocess

import pytest


def png_bytes(img, fmt="PNG") -> bytes:
    """A PIL image encoded as PNG (or fmt)."""
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def tiny_generator(width=8, z_dim=16, seed=0):
    """A real, untrained generator small enough to build in milliseconds."""
    import torch
    from core.models import Generator, GeneratorSpec, init_weights
    torch.manual_seed(seed)
    generator = Generator(GeneratorSpec(z_dim, 1, 28, width))
    generator.apply(init_weights)
    return generator.eval()


def save_generator_pair(folder, generator, step=7, dataset="bundled-mnist", **meta_extra):
    """generator.safetensors + generator.json in folder, as a run saves them; their paths."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    save_file(generator.state_dict(), os.path.join(folder, "generator.safetensors"))
    meta = {"spec": generator.spec.to_dict(), "config": {"dataset": dataset}, "step": step,
            "format": "blink-generator-v1", **meta_extra}
    with open(os.path.join(folder, "generator.json"), "w") as f:
        json.dump(meta, f)
    return os.path.join(folder, "generator.safetensors"), os.path.join(folder, "generator.json")


def leftovers(folder: str) -> list[str]:
    """Temp files of atomic writes (name.tmp<pid>) anywhere under folder."""
    return glob.glob(os.path.join(folder, "**", "*.tmp*"), recursive=True)


@pytest.fixture
def mount(tmp_path):
    """mount(name, options) -> a tmpfs at tmp_path/name (e.g. "size=1m" or "ro"), unmounted after."""
    mounted = []

    def make(name: str, options: str) -> str:
        path = str(tmp_path / name)
        os.makedirs(path, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"mounting a small tmpfs is not allowed here (needs root with CAP_SYS_ADMIN): "
                        f"{done.stderr.strip()}")
        mounted.append(path)
        return path
    yield make
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", path], capture_output=True)


def cpu_plan(config=None, data=None, **values):
    """A run's plan as a Start on a 2-core CPU makes it (its dataset listed, nothing decoded; or from
    `data`, a core.plan.DataFacts, for a dataset this machine has not fetched), for a test that
    seeds a run directory: RunDir.create(cpu_plan(steps=40), root)."""
    from core.config import TrainConfig
    from core.devices import DeviceInfo
    from core.plan import make_plan, plan_run
    config, cpu = config or TrainConfig(**values), DeviceInfo("cpu", "CPU (2 cores)", available=2)
    return plan_run(config, cpu) if data is None else make_plan(config, cpu, data)
