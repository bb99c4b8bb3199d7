"""Start the real app as a test does (tests/apphelpers.RunningApp), print its pid, and wait to be
killed: the test kills this process with SIGKILL and checks that the app ends too. The pid is
printed as soon as the app's process exists: what ends it is RunningApp's, however far the app got.

    python tests/fault_scripts/hold_app.py RUNS_ROOT
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.apphelpers import RunningApp  # noqa: E402

app = RunningApp(sys.argv[1])
print(app.process.pid, flush=True)
time.sleep(600)
