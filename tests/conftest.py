import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
# No telemetry or version checks: the suite runs offline.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    """A private runs folder, so tests never see each other's runs."""
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setenv("BLINK_RUNS_DIR", str(root))
    return str(root)
