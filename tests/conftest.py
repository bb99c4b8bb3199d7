import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from tests.filehelpers import mount  # noqa: E402,F401  (a fixture: a real small tmpfs, for the disk tests)

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


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The real app (`python app.py`) on an empty runs folder, one per test module; a module that
    needs another set-up defines its own `app`."""
    from tests.apphelpers import RunningApp
    running = RunningApp(str(tmp_path_factory.mktemp("runs"))).wait_ready()
    yield running
    assert running.stop() is not None
