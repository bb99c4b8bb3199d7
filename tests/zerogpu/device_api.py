"""A stand-in for ZeroGPU's device API, written from the `spaces` 0.51.3 package's own client.

On a ZeroGPU Space, `spaces` (spaces/zero/client.py, api.py) asks a device API over HTTP for each
`@spaces.GPU` call: POST /schedule (a GPU now as JSON, a queue as server-sent events, or a
refusal: 429 with the quota left, 401 for an expired proxy token, 503 for no GPU), then /allow
with the pid of the worker it forked, then /release when the call ends. The API, not the
package, ends a call that outlasts its duration: it kills the allowed worker. This server plays
that part on loopback so the package's own code (the HTTP road, the fork per call, the worker
kept and reused between calls, the refusals) runs on a machine without ZeroGPU.

What it plays is scripted: each /schedule takes the next answer of the plan (POST /plan with a
JSON list), "grant" once the plan is empty. Answers:
    "grant"            a GPU at once
    "queue:N"          N pings of ZeroGPU's queue (0.25 s apart), then a GPU
    "quota"            429: the presser's quota is spent (12 s left, 2 h 41 min to wait)
    "busy"             503: no GPU was available
    "abort"            a GPU, and the worker killed as soon as the call has trained (the run's
                       `progress()` moved on from where it stood at the grant): a node lost mid-call,
                       at a point the test names rather than after some seconds, which a faster
                       machine would outrun
    "hold"             a GPU, and the worker stopped (SIGSTOP) as soon as the call has trained, until
                       the test calls release(): a call that is still going when the test acts
A token in `expired_tokens` (POST /expire) gets 401 whatever the plan. `spaces` allows a worker
once, when it forks it, and runs later calls in it while it lives (idle: true): a call's clock
starts at its grant then, in the worker allowed last. Every call is kept in GET /log, with the
duration asked, the token, the worker's pid, and the times of its start and release.

    server = DeviceApi().start()          # server.url for SPACES_ZERO_DEVICE_API_URL
    server.plan(["queue:8", "grant"]); ...; server.log(); server.stop()
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PING_SECONDS = 0.25
ABORT_LOOK_SECONDS = 0.005   # how often "abort" looks at the run's progress: far within one step


class DeviceApi:
    def __init__(self, duration_factor: float = 1.0, progress=lambda: 0):
        """progress(): how far the run has trained (its newest logged step): "abort" watches it."""
        self.lock = threading.Lock()
        self.progress = progress
        self.held = threading.Event()             # a "hold" call's worker is stopped
        self._held_pid: int | None = None
        self.answers: list[str] = []
        self.expired_tokens: set[str] = set()
        self.calls: list[dict] = []           # one per /schedule, in order
        self.by_token: dict[str, dict] = {}   # allowToken -> its call
        self.duration_factor = duration_factor
        self.worker_pid: int | None = None    # the worker /allow named last: `spaces` reuses it
        self.allows = 0                       # workers started: fewer than calls when one is reused
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "DeviceApi":
        threading.Thread(target=self.server.serve_forever, daemon=True, name="device-api").start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- what a test sets and reads ------------------------------------------------------
    def plan(self, answers: list[str]) -> None:
        with self.lock:
            self.answers = list(answers)

    def expire(self, token: str) -> None:
        with self.lock:
            self.expired_tokens.add(token)

    def release(self) -> None:
        """The held call's worker goes on (SIGCONT)."""
        with self.lock:
            pid, self._held_pid = self._held_pid, None
        self.held.clear()
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    def log(self) -> list[dict]:
        with self.lock:
            return [dict(call) for call in self.calls]

    # ---- the API -------------------------------------------------------------------------
    def _schedule(self, params: dict) -> tuple[int, dict, object]:
        """(status, headers, body): body a dict (JSON), or a list of SSE events to stream."""
        token = params.get("token")
        with self.lock:
            answer = "expired" if token in self.expired_tokens else (self.answers.pop(0) if self.answers else "grant")
            call = {"answer": answer, "token": token, "duration": int(params.get("durationSeconds", 0)),
                    "asked": time.time(), "allowed": None, "released": None, "fail": None, "pid": None,
                    "cancelled": False}
            self.calls.append(call)
        auth = {"X-Authenticated": "regular"} if token else {}
        if answer == "expired":
            return 401, auth, {"detail": "expired"}
        if answer == "busy":
            return 503, auth, {"detail": "no GPU"}
        if answer == "quota":
            return 429, auth, {"left": 12, "wait": 9660}
        allow_token = uuid.uuid4().hex
        with self.lock:
            call["allow_token"] = allow_token
            self.by_token[allow_token] = call
        grant = {"idle": True, "nvidiaIndex": 0, "nvidiaUUID": "GPU-stand-in", "allowToken": allow_token}
        if answer.startswith("queue:"):
            return 200, {**auth, "X-Queuing-Reason": "node"}, (int(answer.split(":")[1]), grant, call)
        self._granted(call)
        return 200, auth, grant

    def _granted(self, call: dict) -> None:
        """The GPU is the call's from now. A worker kept from an earlier call (idle: true) is not
        allowed again (spaces/zero/wrappers.py allows a worker once, when it starts): its call
        runs in the worker /allow named last, and the duration counts from here."""
        with self.lock:
            pid = self.worker_pid
        if pid is not None and os.path.exists(f"/proc/{pid}"):
            self._start_clock(call, pid)

    def _start_clock(self, call: dict, pid: int) -> None:
        with self.lock:
            call["allowed"], call["pid"] = time.time(), pid
        # ZeroGPU ends a call past its duration (times the node's factor); "abort" ends it once it trained.
        timer = threading.Timer(call["duration"] * self.duration_factor, self._end_if_running, args=(call,))
        timer.daemon = True
        timer.start()
        if call["answer"] in ("abort", "hold"):
            threading.Thread(target=self._act_once_trained, args=(call, self.progress()), daemon=True).start()

    def _act_once_trained(self, call: dict, granted_at: int) -> None:
        while call["released"] is None and self.progress() <= granted_at:
            time.sleep(ABORT_LOOK_SECONDS)
        if call["answer"] == "abort":
            self._end_if_running(call)
            return
        with self.lock:
            if call["released"] is not None:
                return
            self._held_pid = call["pid"]
        os.kill(call["pid"], signal.SIGSTOP)
        self.held.set()

    def _allow(self, params: dict) -> int:
        """A new worker (the first call, or one after the last worker died) names its pid."""
        pid = int(params["pid"])
        with self.lock:
            call = self.by_token.get(params.get("allowToken"))
            if call is None:
                return 404
            self.worker_pid = pid
            self.allows += 1
        if call["pid"] != pid:
            self._start_clock(call, pid)
        return 200

    def _end_if_running(self, call: dict) -> None:
        with self.lock:
            if call["released"] is not None:
                return
            call["killed"] = time.time()
        try:
            os.kill(call["pid"], signal.SIGKILL)
        except OSError:
            pass

    def _release(self, params: dict) -> int:
        with self.lock:
            call = self.by_token.get(params.get("allowToken"))
            if call is None:
                return 404
            call["released"], call["fail"] = time.time(), params.get("fail") == "true"
        return 200

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):   # quiet: the log is GET /log
                pass

            def _answer(self, status: int, body=None, headers: dict | None = None) -> None:
                data = json.dumps(body if body is not None else {}).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlparse(self.path)
                if url.path == "/queue-size":
                    return self._answer(200, 0)
                if url.path == "/log":
                    return self._answer(200, {"calls": api.log(), "workers_started": api.allows})
                self._answer(404)

            def do_POST(self):
                url = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null") if length else None
                if url.path == "/startup-report":
                    return self._answer(200)
                if url.path == "/plan":
                    api.plan(body)
                    return self._answer(200)
                if url.path == "/expire":
                    api.expire(body)
                    return self._answer(200)
                if url.path == "/allow":
                    return self._answer(api._allow(params))
                if url.path == "/release":
                    return self._answer(api._release(params))
                if url.path != "/schedule":
                    return self._answer(404)
                status, headers, body = api._schedule(params)
                if not isinstance(body, tuple):
                    return self._answer(status, body, headers)
                self._stream_queue(*body, headers)

            def _stream_queue(self, pings: int, grant: dict, call: dict, headers: dict) -> None:
                """ZeroGPU's queue: pings while the visitor waits, then the GPU. A client that
                closes the stream (the visitor left; a Stop) is never given one."""
                self.send_response(200)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for _ in range(pings):
                        self.wfile.write(b"event: ping\n\n")
                        self.wfile.flush()
                        time.sleep(PING_SECONDS)
                    self.wfile.write(f"event: succeeded\ndata: {json.dumps(grant)}\n\n".encode())
                    self.wfile.flush()
                    api._granted(call)
                except OSError:
                    with api.lock:
                        call["cancelled"] = True
                        api.by_token.pop(grant["allowToken"], None)

        return Handler


if __name__ == "__main__":   # by hand: python tests/zerogpu/device_api.py (prints the URL)
    server = DeviceApi().start()
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
