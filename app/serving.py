"""The HTTP server's last mile.

TimedHTTPProtocol (given to Gradio's server by app/patches.py close_slow_requests) closes a
connection that has not sent a whole request's headers within REQUEST_HEADERS_SECONDS: uvicorn
waits forever, so silent clients could hold sockets. A request whose headers arrived is never cut.

UploadLimits bounds Gradio's upload route (POST /gradio_api/upload, open to anyone): the bytes its
copies may hold at once, the files one address may send in a while, how long a copy waits to be used.
FileHandles, in front of the whole app, names Gradio's file folder by a handle in its answers and
back in the calls and file URLs, so no answer names a server path. Both go in app.py's middleware=.

The app's temp folders (its uploads, the Sample tab's files) name the process that made them, so the
next app to start removes those of one that died without cleaning up (remove_dead_apps_folders).
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import hmac
import json
import os
import shutil
import tempfile
import time

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from app.patches import write_cached_images_whole  # noqa: F401  (tests/unit/test_drawn_once.py names it here)

REQUEST_HEADERS_SECONDS = 10.0

UPLOAD_ROUTE = "/gradio_api/upload"
# Room for this many of the largest files the app takes on their way to the handler that checks them:
# a host's dataset zip while someone else's generator arrives.
UPLOADS_AT_ONCE = 2
# Files one address may send in UPLOAD_WINDOW_SECONDS: a host trying a few datasets and
# generators, or a class behind one school address each sending one, fits; a script looping does not.
UPLOAD_FILES_PER_CLIENT = 40
UPLOAD_WINDOW_SECONDS = 600.0
# How long Gradio's copy of an upload is kept for the event that uses it: the host's, longer than a busy
# queue or a host choosing files takes; anyone else's a minute, so a flood of unused ones soon lets go.
UPLOAD_KEEP_SECONDS = 600.0
ROOM_UPLOAD_KEEP_SECONDS = 60.0
# The host's own share of the bound, beside the room's, so the host's dataset goes in beside any flood;
# the host's page shows it with a cookie holding the host key (set when the key is typed: app/ui.py).
HOST_UPLOADS_AT_ONCE = 1
HOST_COOKIE = "blink-host-key"
# The file in each of the app's temp folders that names the process that made it.
OWNER_FILE = "app.pid"


class TimedHTTPProtocol(AutoHTTPProtocol):
    """uvicorn's protocol (h11 or httptools), closing a connection that waits too long for headers."""

    _header_timer = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_timer is None and self._waiting_for_headers():   # a next request on a kept-alive connection
            self._arm()

    def connection_lost(self, exc) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(REQUEST_HEADERS_SECONDS, self._headers_due)

    def _headers_due(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


# ---- Gradio's upload route, bounded -----------------------------------------------------------------
def upload_limits(max_file_mb: float, trust_forwarded: bool, host_key: str = ""):
    """The middleware for FastAPI's `middleware=` (Gradio's launch app_kwargs). host_key: the page's
    ('' where it has none: everyone is the host)."""
    from starlette.middleware import Middleware
    return Middleware(UploadLimits, max_bytes=int(UPLOADS_AT_ONCE * max_file_mb * 2**20),
                      host_bytes=int(HOST_UPLOADS_AT_ONCE * max_file_mb * 2**20), trust_forwarded=trust_forwarded,
                      host_key=host_key)


class UploadLimits:
    """ASGI middleware in front of Gradio's upload route: an upload is refused unread when its declared
    size does not fit beside the copies held and in flight (413), or when its address has sent its
    files for the window (429; an answer that would take it past has its files removed). Each copy
    is removed its keep time after its last upload (a handler may remove it sooner)."""

    def __init__(self, app, max_bytes: int, host_bytes: int = 0, trust_forwarded: bool = False, host_key: str = ""):
        """max_bytes: what the room's uploads may hold at once; host_bytes: the host's share beyond it."""
        self.app = app
        self.max_bytes, self.host_bytes, self.host_key = max_bytes, host_bytes, host_key
        self.trust_forwarded = trust_forwarded
        self._in_flight = 0                                   # bytes declared by uploads being read
        self._held: dict[str, tuple[int, float]] = {}         # copy -> (its size, when last uploaded)
        self._sent: dict[str, collections.deque] = {}         # address -> (when, files) of its uploads

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith(UPLOAD_ROUTE):
            return await self.app(scope, receive, send)
        client, now = self._client(scope), time.monotonic()
        if self._files_sent(client, now) >= UPLOAD_FILES_PER_CLIENT:
            return await self._refuse(send, 429, self._too_many())
        declared = _content_length(scope)
        if declared is None:
            return await self._refuse(send, 411, "Upload refused: an upload must state its size (Content-Length).")
        held, host = self._held_bytes(), self._from_host(scope)
        cap = self.max_bytes + (self.host_bytes if host else 0)
        if held + self._in_flight + declared > cap:
            return await self._refuse(send, 413, self._too_big(declared, held + self._in_flight, cap, host))
        self._in_flight += declared
        answer: list[dict] = []

        async def keep(message) -> None:
            answer.append(message)     # sent on by _answer, once the whole answer is known
        try:
            await self.app(scope, receive, keep)
        finally:
            self._in_flight -= declared
        await self._answer(send, answer, client, UPLOAD_KEEP_SECONDS if host else ROOM_UPLOAD_KEEP_SECONDS)

    def _client(self, scope) -> str:
        """The sender's address; behind a proxy the first of X-Forwarded-For, as the proxy says
        (a client may forge it, so this bounds fair use; the byte cap holds for everyone)."""
        if self.trust_forwarded:
            for name, value in scope.get("headers", ()):
                if name == b"x-forwarded-for" and value.split(b",")[0].strip():
                    return value.split(b",")[0].strip().decode("latin-1")
        return (scope.get("client") or ("?",))[0]

    def _files_sent(self, client: str, now: float) -> int:
        for address in list(self._sent):      # forget every address whose window has passed
            sent = self._sent[address]
            while sent and now - sent[0][0] > UPLOAD_WINDOW_SECONDS:
                sent.popleft()
            if not sent:
                del self._sent[address]
        return sum(files for _, files in self._sent.get(client, ()))

    def _held_bytes(self) -> int:
        """Bytes of the copies still there (a handler may have removed some)."""
        for path in [p for p in self._held if not os.path.exists(p)]:
            del self._held[path]
            _remove_empty_folder(os.path.dirname(path))
        return sum(size for size, _ in self._held.values())

    def _from_host(self, scope) -> bool:
        """Whether the upload comes from the host's page: its cookie holds the host key."""
        if not self.host_key:
            return True
        from http.cookies import SimpleCookie
        from urllib.parse import unquote
        cookie = SimpleCookie()
        for name, value in scope.get("headers", ()):
            if name == b"cookie":
                try:
                    cookie.load(value.decode("latin-1"))
                except Exception:   # a malformed cookie header: no host's cookie in it
                    return False
        sent = cookie.get(HOST_COOKIE)
        return sent is not None and hmac.compare_digest(unquote(sent.value).encode(), self.host_key.encode())

    async def _answer(self, send, answer: list[dict], client: str, keep_seconds: float) -> None:
        start = next((m for m in answer if m["type"] == "http.response.start"), None)
        paths = _uploaded_paths(answer) if start is not None and start["status"] == 200 else []
        now = time.monotonic()
        if paths and self._files_sent(client, now) + len(paths) > UPLOAD_FILES_PER_CLIENT:
            for path in paths:
                if path not in self._held:     # not a copy another upload is still owed
                    _remove_file(path)
            return await self._refuse(send, 429, self._too_many())
        if paths:
            self._sent.setdefault(client, collections.deque()).append((now, len(paths)))
            loop = asyncio.get_running_loop()
            for path in paths:
                try:
                    self._held[path] = (os.path.getsize(path), now)
                except OSError:
                    continue
                loop.call_later(keep_seconds, self._expire, path, now)
        for message in answer:
            await send(message)

    def _expire(self, path: str, uploaded: float) -> None:
        held = self._held.get(path)
        if held is not None and held[1] == uploaded:   # not uploaded again since (then its own timer runs)
            del self._held[path]
            _remove_file(path)

    def _too_many(self) -> str:
        return (f"Upload refused: at most {UPLOAD_FILES_PER_CLIENT} files per address every "
                f"{UPLOAD_WINDOW_SECONDS / 60:.0f} minutes. Try again later.")

    def _too_big(self, declared: int, used: int, cap: int, host: bool) -> str:
        cap_mb = cap / 2**20
        if declared > cap:
            return f"Upload refused: larger than the {cap_mb:.0f} MB this server takes at once."
        wait = "in a few minutes" if host else "in a minute (the host's uploads have a share of their own)"
        return (f"Upload refused: this server holds at most {cap_mb:.0f} MB of uploads waiting to be used "
                f"({used / 2**20:.0f} MB now). Try again {wait}.")

    @staticmethod
    async def _refuse(send, status: int, text: str) -> None:
        from app.errors import log_refusal
        log_refusal(f"upload, HTTP {status}", text)
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
        if status == 429:
            headers.append((b"retry-after", str(int(UPLOAD_WINDOW_SECONDS)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": text.encode()})


def _content_length(scope) -> int | None:
    value = _header(scope, b"content-length")
    return int(value) if value.isdigit() else None


def _uploaded_paths(answer: list[dict]) -> list[str]:
    """The copies Gradio's upload route answered with (a JSON list of their paths)."""
    try:
        paths = json.loads(b"".join(m.get("body", b"") for m in answer if m["type"] == "http.response.body"))
    except ValueError:
        return []
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []


def _remove_file(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        return
    _remove_empty_folder(os.path.dirname(path))


def _remove_empty_folder(folder: str) -> None:
    """Gradio keeps each upload in a folder of its own, named by its content."""
    try:
        os.rmdir(folder)
    except OSError:    # not empty (the same content under another name), or gone
        pass


# ---- answers that name no server path ----------------------------------------------------------------
# What a client sees in place of the folder Gradio keeps its files in (GRADIO_TEMP_DIR): each file
# Gradio answers with, and each URL it serves a file by, is `blink-files/<hash>/<name>`.
FILE_HANDLE = "blink-files"


def file_handles(folder: str):
    """The middleware for FastAPI's `middleware=`: FileHandles for Gradio's file folder."""
    from starlette.middleware import Middleware
    return Middleware(FileHandles, folder=folder)


class FileHandles:
    """ASGI middleware in front of the whole app: out, in JSON and event-stream answers, Gradio's file
    folder becomes FILE_HANDLE; in, in JSON calls and file URLs, FILE_HANDLE becomes the folder again.
    The files, and Gradio's checks of where a file may be read from, are unchanged."""

    def __init__(self, app, folder: str):
        self.app = app
        folders = {folder.rstrip("/"), os.path.abspath(folder), os.path.realpath(folder)}   # as set, and resolved
        self._out = [(f.encode() + b"/", FILE_HANDLE.encode() + b"/") for f in sorted(folders, key=len, reverse=True)]
        self._in = (FILE_HANDLE.encode() + b"/", os.path.abspath(folder).encode() + b"/")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        handle, real = self._in
        if handle in scope.get("raw_path", b"") or handle.decode() in scope["path"]:
            scope = {**scope, "path": scope["path"].replace(handle.decode(), real.decode()),
                     "raw_path": scope.get("raw_path", b"").replace(handle, real)}
        if scope["method"] == "POST" and _header(scope, b"content-type").startswith(b"application/json"):
            receive, scope = await self._named_in(scope, receive)
        await self.app(scope, receive, self._named_out(send))

    async def _named_in(self, scope, receive):
        """The call's JSON body, read whole (a call is small), with each handle the folder again."""
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return _replay([message], receive), scope
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks).replace(*self._in)
        headers = [(k, str(len(body)).encode() if k == b"content-length" else v) for k, v in scope["headers"]]
        return _replay([{"type": "http.request", "body": body, "more_body": False}], receive), {**scope, "headers": headers}

    def _named_out(self, send):
        """send, with the folder named by its handle in JSON answers (read whole, its length set
        again) and in event streams (each message as it goes)."""
        state = {"kind": None, "start": None, "body": []}

        def renamed(body: bytes) -> bytes:
            for real, handle in self._out:
                body = body.replace(real, handle)
            return body

        async def send_named(message):
            if message["type"] == "http.response.start":
                kind = dict(message.get("headers", ())).get(b"content-type", b"")
                state["kind"] = ("json" if kind.startswith(b"application/json")
                                 else "stream" if kind.startswith(b"text/event-stream") else None)
                if state["kind"] == "json":
                    state["start"] = message   # sent with the whole answer, its length known
                    return
                return await send(message)
            if message["type"] != "http.response.body" or state["kind"] is None:
                return await send(message)
            if state["kind"] == "stream":
                return await send({**message, "body": renamed(message.get("body", b""))})
            state["body"].append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = renamed(b"".join(state["body"]))
            start = state["start"]
            headers = [(k, str(len(body)).encode() if k == b"content-length" else v) for k, v in start["headers"]]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        return send_named


def _header(scope, name: bytes) -> bytes:
    return next((value for key, value in scope.get("headers", ()) if key == name), b"")


def _replay(messages: list[dict], receive):
    """A `receive` that gives these messages first (a body read already), then the connection's own
    (its disconnect, when it comes)."""
    queue = list(messages)

    async def replayed():
        return queue.pop(0) if queue else await receive()
    return replayed


# ---- the app's temp folders -------------------------------------------------------------------------
UPLOADS_FOLDER_PREFIX = "blink-uploads-"     # Gradio's uploads (GRADIO_TEMP_DIR), made by app.py
SAMPLE_FOLDER_PREFIX = "blink-sample-"       # the Sample tab's returned files (app/sample_tab.py)


def app_temp_folder(prefix: str) -> str:
    """A new folder under the temp folder, naming this process as its owner, removed at exit."""
    folder = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(folder, OWNER_FILE), "w") as f:
        f.write(str(os.getpid()))
    atexit.register(shutil.rmtree, folder, True)   # True: ignore errors
    return folder


def remove_dead_apps_folders() -> list[str]:
    """Remove the temp folders of apps that died without removing them; returns their paths. A folder
    whose owner is alive, or that names none (still being made), is kept."""
    from core.rundir import pid_alive
    root, removed = tempfile.gettempdir(), []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        folder = os.path.join(root, name)
        if not name.startswith((UPLOADS_FOLDER_PREFIX, SAMPLE_FOLDER_PREFIX)) or os.path.islink(folder):
            continue
        try:
            if os.stat(folder).st_uid != os.getuid():
                continue       # another user's app: not ours to judge
            with open(os.path.join(folder, OWNER_FILE)) as f:
                owner = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if not pid_alive(owner):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
