"""The parts of a machine a test may need and a developer's machine may lack: torch_xla, Debian's
chromium, the emoji font (and its list), the shipped digit classifier.

A test names what it needs with `@pytest.mark.needs("chromium")` (tests/conftest.py reads the mark
before any fixture starts). Where a part is missing the test is skipped, saying how to get it; in
CI, where .ci/run sets EVERY_PART=1, it fails instead, so a green CI run means every part ran.
"""
from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

EVERY_PART = "BLINK_TESTS_NEED_EVERY_PART"
CHROMIUM = "/usr/bin/chromium"


def _torch_xla() -> str:
    # Looked up, not imported: pytest itself never imports torch_xla. A broken install still fails
    # the XLA tests (tests/xla), as a user's run would.
    return "" if importlib.util.find_spec("torch_xla") else \
        "torch_xla is not installed (Linux x86_64 wheels only: pip install -r requirements.txt)"


def _chromium() -> str:
    return "" if os.path.exists(CHROMIUM) and shutil.which("chromium") else \
        "Debian's chromium is not installed (apt-get install chromium)"


def _emoji_font() -> str:
    from tools.build_benchmark_set import INSTALL_COMMAND, missing_sources
    missing = missing_sources()
    return f"the benchmark set is drawn from Debian's {' and '.join(missing)}: {INSTALL_COMMAND}" if missing else ""


def _classifier() -> str:
    from core import quality
    return "" if os.path.exists(quality.CLASSIFIER_WEIGHTS) else \
        "assets/mnist_classifier.safetensors is missing: run tools/train_classifier.py"


PARTS = {"torch_xla": _torch_xla, "chromium": _chromium, "emoji font": _emoji_font, "classifier": _classifier}


def missing(part: str) -> str:
    """Why `part` is missing here, or '' when it is present."""
    return PARTS[part]()


def require(part: str) -> None:
    """Skip the running test when `part` is missing; fail it in CI (EVERY_PART=1)."""
    why = missing(part)
    if not why:
        return
    if os.environ.get(EVERY_PART) == "1":
        pytest.fail(f"{why} ({EVERY_PART}=1: CI runs every part)", pytrace=False)
    pytest.skip(why)
