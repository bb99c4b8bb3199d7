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
# The test modules import Gradio as the app does (app/gradio_import.py).
from app.gradio_import import trim_gradio_import  # noqa: E402
trim_gradio_import()
# XLA:CPU compiling fast (tests/xla/xlahelpers.py FAST_COMPILE) in every process the tests start.
from tests.xla.xlahelpers import FAST_COMPILE  # noqa: E402
os.environ.setdefault("XLA_FLAGS", FAST_COMPILE["XLA_FLAGS"])


def pytest_runtest_setup(item):
    """A test marked `needs("part", ...)` is skipped where a part is missing, or fails in CI
    (tests/parts.py): before any of its fixtures start, so none tries to use what is not there."""
    from tests.parts import require
    if item.get_closest_marker("xla"):
        require("torch_xla")
    for mark in item.iter_markers("needs"):
        for part in mark.args:
            require(part)


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    """A private runs folder, so tests never see each other's runs."""
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setenv("BLINK_RUNS_DIR", str(root))
    return str(root)


@pytest.fixture(scope="module")
def app(request, tmp_path_factory):
    """The real app (`python app.py`) that a test module's tests share, the one way a module starts
    one: on a folder of its own (`app.folder`; the runs in `app.runs_root`, its `runs`), stopped
    after the module. A module adjusts it with two names of its own:
        APP_ENV = {...}        environment variables for the app ("{folder}" is replaced by its folder)
        APP_SETUP(folder)      prepares the folder (files, runs) before the app starts
    A test that needs an app of its own starts a RunningApp and stops it itself."""
    from tests.apphelpers import RunningApp
    folder = tmp_path_factory.mktemp("app")
    (folder / "runs").mkdir()
    setup = getattr(request.module, "APP_SETUP", None)
    if setup:
        setup(folder)
    env = {k: v.format(folder=folder) for k, v in getattr(request.module, "APP_ENV", {}).items()}
    running = RunningApp(str(folder / "runs"), env=env).wait_ready()
    running.folder = folder
    yield running
    assert running.stop() is not None


# The unit files that take longest, in that order (each file's time in a full run of the suite),
# collected before the other unit files (pytest.ini's testpaths orders the folders).
LONG_UNIT_FILES = ("test_core.py", "test_ddp.py", "test_train_tab.py", "test_sample_handlers.py", "test_sample.py",
                   "test_quality.py", "test_losses.py", "test_rows.py", "test_resume_changes.py", "test_heartbeat.py")


def pytest_collection_modifyitems(items):
    folder_first: dict[str, int] = {}
    for i, item in enumerate(items):
        folder_first.setdefault(item.nodeid.split("::")[0].rpartition("/")[0], i)

    def order(item) -> tuple[int, int]:   # each folder where it was; in tests/unit, the long files first
        folder, _, name = item.nodeid.split("::")[0].rpartition("/")
        long = LONG_UNIT_FILES.index(name) if folder == "tests/unit" and name in LONG_UNIT_FILES else len(LONG_UNIT_FILES)
        return folder_first[folder], long
    items.sort(key=order)
