"""Start the real app as its own process (python app.py), as a user would, and stop it."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from tests.filehelpers import cpu_plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Debian's chromium, driven through Playwright by the browser tests (marked needs("chromium")).
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _end_with_this_process() -> None:
    """In the app's child, before exec: the kernel sends it SIGTERM (a clean stop: its trainer
    stops too) when the test process dies, so a killed test run leaves no app behind."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Refused(RuntimeError):
    """A call of the named API that the app answered with an error: `message` is what the page shows."""

    def __init__(self, api_name: str, data):
        self.message = data.get("error", "") if isinstance(data, dict) else str(data)
        super().__init__(f"{api_name} refused: {data}")


class RunningApp:
    def __init__(self, runs_root: str, extra_args: tuple[str, ...] = (), env: dict | None = None,
                 script: str = "app.py"):
        """script: what starts the app (tests/zerogpu/space.py starts it as a ZeroGPU Space would)."""
        self.runs_root = runs_root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = os.path.join(runs_root, f"app-{self.port}.log")
        environment = {**os.environ, "BLINK_RUNS_DIR": runs_root, "GRADIO_ANALYTICS_ENABLED": "False",
                       "PYTHONUNBUFFERED": "1", **(env or {})}
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen([sys.executable, script, "--port", str(self.port), *extra_args],
                                        cwd=ROOT, env=environment, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=_end_with_this_process)

    def wait_ready(self, timeout: float = 180.0) -> "RunningApp":
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"app exited with {self.process.returncode}:\n{self.read_log()}")
            try:
                urllib.request.urlopen(self.url, timeout=2).read(100)
                return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"app not ready after {timeout}s:\n{self.read_log()}")

    def read_log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def client(self):
        from gradio_client import Client
        return Client(self.url, verbose=False)

    def call(self, api_name: str, *args, timeout: float = 240.0):
        """One call of the named API through Gradio's REST road (POST /gradio_api/call/NAME, then its
        event stream): the queue and the handlers a gradio_client call meets, without the client's
        set-up, which costs the test process a fraction of a second per client (a room of them, seconds)."""
        import json
        request = urllib.request.Request(f"{self.url}gradio_api/call/{api_name}", method="POST",
                                         data=json.dumps({"data": list(args)}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            event_id = json.load(answer)["event_id"]
        with urllib.request.urlopen(f"{self.url}gradio_api/call/{api_name}/{event_id}", timeout=timeout) as stream:
            event = ""
            for line in stream:
                line = line.decode().strip()
                if line.startswith("event: "):
                    event = line[len("event: "):]
                elif line.startswith("data: ") and event in ("complete", "error"):
                    data = json.loads(line[len("data: "):])
                    if event == "error":
                        raise Refused(api_name, data)
                    return data
        raise RuntimeError(f"{api_name}: the event stream ended without an answer")

    def status(self) -> dict:
        """The run's status as a script reads it from the page's own feed (/live/status): the named
        API's /status but its grid URL. For the tests' wait loops: a gradio_client call costs this
        process tens of milliseconds of CPU, this one under one."""
        import json
        with urllib.request.urlopen(self.url + "live/status", timeout=60) as answer:
            return json.load(answer)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
        """Stop the app as Ctrl-C would; kill it if it does not exit in time."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        return self.process.returncode


def children_of(pid: int) -> list[int]:
    """Live descendant pids of pid (from /proc), to check that nothing is left behind."""
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            kids = open(f"/proc/{parent}/task/{parent}/children").read().split()
        except OSError:
            continue
        for kid in map(int, kids):
            found.append(kid)
            frontier.append(kid)
    return found


def torch_loaded(pid: int) -> bool:
    """Whether torch's libraries are mapped into the process `pid` (as a host's `top` would see it)."""
    with open(f"/proc/{pid}/maps") as f:
        return "libtorch" in f.read()


def alive(pid: int) -> bool:
    """True while pid is a live process (a zombie, exited but not reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def press_start(client, timeout: float = 60.0, **form) -> tuple[str, float]:
    """Press Start through the named API; (its message, time.perf_counter() when the accepted
    press was sent). Refused as "already training" it is pressed again: the last run's trainer
    writes its final status a moment before it exits."""
    from gradio_client.exceptions import AppError

    def pressed():
        sent = time.perf_counter()
        try:
            return client.predict(**form, api_name="/start"), sent
        except AppError as exc:
            if "already training" not in str(exc):
                raise
    return wait_for(pressed, timeout, interval=0.2, what="the previous trainer to exit")


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def paused_beat(run_path: str, timeout: float = 120.0) -> dict:
    """The paused trainer's next heartbeat (core/heartbeat.py), one written after this call: the
    trainer itself saying, a beat after the pause, that it is paused and which step last returned.
    What "nothing trains while paused" waits on, in place of a second's sleep."""
    from core.rundir import RunDir
    run, after = RunDir(run_path), time.time()
    return wait_for(lambda: (beat := run.read_heartbeat()).get("time", 0.0) > after and beat["doing"] == "paused"
                    and beat, timeout, interval=0.1, what="a heartbeat of the paused trainer")


def seed_finished_run(runs_root: str, names: list[str], step: int, grid_steps: tuple[int, ...], tiles: int):
    """A finished run as a restarted server finds it, with nothing trained: the shipped generator
    saved as the run's with its classes named `names`, `tiles` random digits a grid at each of
    `grid_steps` (with random verdicts of D's on them), and the real images. Returns the RunDir
    (its status is the caller's to write)."""
    import json
    import numpy as np
    from app.job import SHIPPED_GENERATOR
    from core.config import TrainConfig
    from core.rundir import RunDir
    run = RunDir.create(cpu_plan(gan="dcgan", steps=step, grid_every=100, checkpoint_every=step), runs_root)
    shutil.copy(os.path.join(SHIPPED_GENERATOR, "generator.safetensors"), run.path)
    with open(os.path.join(SHIPPED_GENERATOR, "generator.json")) as f:
        meta = {**json.load(f), "class_names": names, "step": step}
    with open(os.path.join(run.path, "generator.json"), "w") as f:
        json.dump(meta, f)
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (tiles, 1, 28, 28)).astype(np.float32)
    for grid_step in grid_steps:   # each grid with D's verdicts on it, as the trainer saves them
        run.save_grid(images, grid_step, columns=10)
        run.save_verdicts(grid_step, {"kind": "probability", "columns": 10,
                                      "fake": [round(float(v), 4) for v in rng.uniform(0, 1, tiles)],
                                      "real": [round(float(v), 4) for v in rng.uniform(0, 1, tiles)]})
    run.save_real_grid(images, columns=10)
    return run
