"""Install Blink in a Kaggle or Colab TPU notebook without breaking the torch it ships with.

    !python tools/notebook_setup.py

Kaggle's TPU image already has a matched torch + torch_xla; reinstalling requirements.txt's pins
over it is a long download that replaces a working pair. So: keep an installed torch_xla 2.8 or
newer whose torch has the same major.minor (plus a torchvision that matches that torch), else
install a set that has wheels for this Python. Then pip installs the rest of requirements.txt.
Standard library only: it runs before anything else is installed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:   # run as a script from a fresh clone: the repository is not installed
    sys.path.insert(0, ROOT)
from core.versions import TORCH_FAMILY, installed_versions, major_minor, torchvision_for  # noqa: E402

REQUIREMENTS = os.path.join(ROOT, "requirements.txt")
# The oldest torch_xla with every API Blink calls (torch_xla.sync, torch_xla.backends' mat-mul precision).
OLDEST_XLA = (2, 8)
# torch_xla[tpu] 2.9.0 pins libtpu 0.0.21, which has no Python 3.13 wheel, so the extra cannot install
# there; libtpu 0.0.21.1 has one (and is what Colab's 3.13 TPU image ships beside torch_xla 2.9.0), so
# on 3.13 the same pair is installed with that libtpu and the extra's tpu-info named one by one.
PY313_SET = ["torch==2.9.1", "torchvision==0.24.1", "torch_xla==2.9.0", "libtpu==0.0.21.1", "tpu-info"]


@dataclass
class Plan:
    summary: str          # the decision, in one line
    install: list[str]    # torch, torchvision and torch_xla requirements for pip (pins of what is kept)
    tpu: bool             # whether this set can drive a TPU


def requirement_lines(path: str = REQUIREMENTS) -> list[str]:
    """requirements.txt's requirements, comments and blank lines left out."""
    lines = (line.split("#")[0].strip() for line in open(path))
    return [line for line in lines if line]


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower().replace("-", "_")


def decide(python_version: tuple, installed: dict) -> Plan:
    """What to do about torch, torchvision and torch_xla, from the Python version ((3, 12)) and the
    installed versions ({"torch": "2.8.0", ...}; a package that is not installed is absent or None)."""
    py = "%d.%d" % tuple(python_version[:2])
    torch, vision, xla = (installed.get(name) for name in TORCH_FAMILY)
    xla_version = major_minor(xla) or (0, 0)
    if xla_version >= OLDEST_XLA and major_minor(torch) == xla_version:
        # Pinning what is kept stops pip from replacing it for the torchvision or the app's packages.
        keep = [f"torch=={torch}", f"torch_xla=={xla}"]
        if vision and major_minor(vision) == torchvision_for(xla_version):
            return Plan(f"keep the installed torch {torch} + torch_xla {xla} + torchvision {vision} (Python {py})",
                        keep + [f"torchvision=={vision}"], True)
        # Any patch release of the matching minor: with torch pinned, pip picks the one built for it.
        wanted = "torchvision==%d.%d.*" % torchvision_for(xla_version)
        return Plan(f"keep the installed torch {torch} + torch_xla {xla} (Python {py}); install {wanted} "
                    f"to match torch (installed torchvision: {vision or 'none'})", keep + [wanted], True)
    why = ("no torch_xla installed" if not xla else
           f"torch_xla {xla} is older than %d.%d" % OLDEST_XLA if xla_version < OLDEST_XLA else
           f"torch {torch or '(not installed)'} does not match torch_xla {xla}")
    pins = [line for line in requirement_lines() if _name(line) in TORCH_FAMILY]
    if py in ("3.11", "3.12"):
        pins = [line.split(";")[0].strip() for line in pins]
        return Plan(f"{why}: install {' '.join(pins)} (requirements.txt's set, Python {py})", pins, True)
    if py == "3.13":
        return Plan(f"{why}: install {' '.join(PY313_SET)} (Python 3.13: the libtpu 0.0.21 that torch_xla[tpu] "
                    "2.9.0 pins has no Python 3.13 wheel, 0.0.21.1 has)", list(PY313_SET), True)
    pins = [line.split(";")[0].strip() for line in pins if _name(line) != "torch_xla"]
    return Plan(f"no torch_xla wheel for Python {py}: the TPU cannot be used, Blink runs on the CPU "
                f"(install {' '.join(pins)})", pins, False)


def pip_command(plan: Plan) -> list[str]:
    """pip install: the plan's torch family, then requirements.txt without its torch family lines."""
    rest = [line for line in requirement_lines() if _name(line) not in TORCH_FAMILY]
    return [sys.executable, "-m", "pip", "install", "-q", *plan.install, *rest]


def main() -> int:
    plan = decide(sys.version_info[:2], installed_versions())
    print(f"Blink setup: {plan.summary}", flush=True)
    code = subprocess.run(pip_command(plan)).returncode
    if code == 0:
        print("Blink setup: done. Next: python -m core.doctor", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
