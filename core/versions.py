"""Which torch, torchvision and torch_xla are installed, and whether they fit together: read from
the packages' metadata, never imported (importing torch_xla takes seconds, and a mismatched one
fails). Standard library only: tools/notebook_setup.py uses it before anything is installed, and
core.doctor says what it finds.
"""
from __future__ import annotations

import importlib.metadata
import re

TORCH_FAMILY = ("torch", "torchvision", "torch_xla")


def major_minor(version: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2])) if match else None


def torchvision_for(torch: tuple[int, int]) -> tuple[int, int]:
    """The torchvision major.minor built for a torch 2.x major.minor ((2, 8): (0, 23))."""
    return 0, torch[1] + 15


def mismatches(installed: dict) -> list[str]:
    """What does not fit together among the installed torch, torchvision and torch_xla, in words."""
    torch, vision, xla = (major_minor(installed.get(name)) for name in TORCH_FAMILY)
    names = {name: installed.get(name) for name in TORCH_FAMILY}
    problems = []
    if torch and xla and torch != xla:
        want = "%d.%d" % xla
        problems.append(f"torch {names['torch']} and torch_xla {names['torch_xla']} do not match: torch_xla {want} "
                        f"runs only with torch {want}, so importing torch_xla fails and the TPU is not used")
    if torch and vision and torch[0] == 2 and vision != torchvision_for(torch):
        problems.append(f"torchvision {names['torchvision']} does not match torch {names['torch']} (that torch "
                        "needs torchvision %d.%d): a torchvision built for another torch can fail to import"
                        % torchvision_for(torch))
    return problems


def installed_versions() -> dict:
    versions = {}
    for name in TORCH_FAMILY + ("libtpu",):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions
