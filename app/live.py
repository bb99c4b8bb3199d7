"""The live view's server side: one watcher of the run for every viewer, pushing changes.

A viewer's cost must follow the trainer's writes, not clock ticks, so no viewer polls. One watcher
(an asyncio task on the web server's loop, alive while anyone watches) looks at the run twice a
second, renders each new snapshot once into ready-to-send bytes, and every connected page receives
them over one Server-Sent Events stream. Between changes a viewer costs an idle socket.

    /live/events           text/event-stream: a full message on connect, then one small delta per change
    /live/status?since=V   JSON for scripts; waits (up to 25 s) until the version is past V
    /live/grid/RUN/STEP    a grid PNG; grids are never overwritten, so browsers cache them for good
    /live/real/RUN         the run's real images, laid out as its grids (D's verdicts come in the messages)
    /live/stats            how many snapshots were rendered and how many messages were sent

Plots get a bounded payload: at most MAX_POINTS per series on connect (the full events stay
on disk); each later message carries only the points logged since the one before.
"""
from __future__ import annotations

import asyncio
import html
import json
import math
import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field

from app import views
from core import gans
from core.rundir import FINAL_STATES, RunDir
from core.status import Status

WATCH_SECONDS = 0.5        # how often the one watcher looks at the run (a few file stats)
MAX_POINTS = 1000          # per series, in the message a page gets on connect
STATUS_WAIT_SECONDS = 25   # longest a /live/status?since= request waits for a change
KEEPALIVE_SECONDS = 20     # a comment line keeps proxies from closing an idle stream


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def extra_series(gan: str) -> dict[str, str]:
    """The loss's own plotted stats (core/gans.py), {key: label}; none for an unknown GAN type."""
    return getattr(gans.BY_NAME.get(gan), "series", {})


def log_scale(gan: str) -> bool:
    """Whether the page's charts start on a log scale for this loss (a viewer may switch it)."""
    return bool(getattr(gans.BY_NAME.get(gan), "log_scale", False))


def plot_points(events: list[dict], gan: str) -> dict[str, list]:
    """The plotted values of events, as {series key: [[step, value], ...]}, finite values only; a
    stepped update's point (the host's Step while paused) as [step, value, 1], which the page draws
    as a marker off the line."""
    keys = list(views.LOSS_SERIES) + list(extra_series(gan)) + list(views.QUALITY_DISTANCES)
    series: dict[str, list] = {}
    for event in events:
        mark = [1] if event.get("stepped") else []
        for key in keys:
            if _finite(event.get(key)):
                series.setdefault(key, []).append([event["step"], round(float(event[key]), 5), *mark])
    return series


def settings_marks(events: list[dict]) -> list[list]:
    """The host's changes while the run trained (core/train.py Loop.apply_settings), as
    [[step, "D's learning rate 0.001"], ...]: the page marks each on the charts at its step."""
    return [[event["step"], views.settings_words(event["settings"])]
            for event in events if isinstance(event.get("settings"), dict)]


def downsample(points: list, limit: int = MAX_POINTS) -> list:
    """At most `limit` points: evenly spaced ones, always keeping the last (the newest value)."""
    if len(points) <= limit:
        return points
    stride = len(points) / (limit - 1)
    return [points[int(i * stride)] for i in range(limit - 1)] + [points[-1]]


def status_html(status: Status, run_name: str, events: list[dict]) -> str:
    """views.status_line's Markdown (bold, code, line breaks) as escaped HTML for the live panel."""
    text = html.escape(views.status_line(status, run_name, events))
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"`(.+?)`", r"<code>\1</code>", text)
    return text.replace("  \n", "<br>").replace("\n\n", "<br>")


# D's verdicts on each grid (their mean over its real images and its fakes), plotted beside the loss's
# own D statistics, which are D before its update on the step's batch: early on the two can disagree.
FRAME_SERIES = {
    "probability": {"frames_real": "D(x) on the real grid (its frames)", "frames_fake": "D(G(z)) on the fakes' grid (their frames)"},
    "logit": {"frames_real": "D(x) logit on the real grid (its frames)",
              "frames_fake": "D(G(z)) logit on the fakes' grid (their frames)"},
    "pair": {"frames_real": "D(x) against the fakes, on the real grid (its frames)",
             "frames_fake": "D(G(z)) against the real images, on the fakes' grid (their frames)"},
    "score": {"frames_real": "critic's score on the real grid (its frames)",
              "frames_fake": "critic's score on the fakes' grid (their frames)"},
}


def frame_series(gan: str) -> dict[str, str]:
    return FRAME_SERIES.get(getattr(gans.BY_NAME.get(gan), "verdict", None), {})


def frame_points(step: int, verdicts: dict | None) -> dict[str, list]:
    """One grid's verdicts as the frames' two points (their means), {} without verdicts."""
    if not verdicts or not verdicts.get("real") or not verdicts.get("fake"):
        return {}
    return {f"frames_{kind}": [[step, round(sum(verdicts[kind]) / len(verdicts[kind]), 5)]] for kind in ("real", "fake")}


def series_labels(gan: str) -> dict:
    return {"losses": views.LOSS_SERIES, "extra": {**extra_series(gan), **frame_series(gan)},
            "quality": views.QUALITY_DISTANCES}


@dataclass
class Rendered:
    """One snapshot, rendered once for every viewer."""
    version: int
    full: bytes                 # the whole (downsampled) history: for a page that just connected
    delta: bytes                # only what is new since version - 1
    status: dict = field(default_factory=dict)   # the JSON of /live/status and /watch
    run: str = ""


def _sse(message: dict) -> bytes:
    return b"data: " + json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n\n"


class LiveFeed:
    """Watches the job's current run for all viewers and renders each change once."""

    def __init__(self, job, watch_seconds: float = WATCH_SECONDS):
        self.job = job
        self.watch_seconds = watch_seconds
        self.renders = 0                 # snapshots rendered: one per change, however many viewers
        self.messages_sent = 0
        self.viewers = 0
        self.current: Rendered | None = None   # the newest rendered snapshot
        self._seen_key = None
        self._events_sent = 0            # events of the current run already in a message
        self._events_file = None         # which events file they came from (Snapshot.events_file)
        self._changed: asyncio.Event | None = None
        self._watcher: asyncio.Task | None = None
        self._waiters = 0                # viewers plus waiting /live/status requests
        self._render_lock = threading.Lock()
        self._verdicts_read: tuple = (None, None)   # ((run path, step), that grid's verdicts)
        self._compared_read: dict = {}               # the compared run's events, grids and config (_compared)
        self._frames_read: dict = {}                 # the current run's frames' points (_frames)
        self._differences_said: tuple = (None, ("", "", ""))   # ((live config, its time, compared run), (words, captions))

    # ---- the one watcher ---------------------------------------------------------------------
    def refresh(self) -> bool:
        """Render the run if it changed since the last look; True if it did."""
        with self._render_lock:   # the watcher and a first viewer's join may ask at once
            return self._render_locked()

    async def _refresh_and_wake(self) -> None:
        """Refresh off the event loop (file reads); on a change, wake everyone waiting for one."""
        if await asyncio.to_thread(self.refresh):
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    def _render_locked(self) -> bool:
        snap = self.job.snapshot()
        compared = self.job.comparison.run
        # The compared run's own version: it changes while that run trains on beside the live one.
        key = (snap.version, snap.run_name, compared.path if compared else None,
               self._compared(compared)["updated"] if compared else None, self.job.comparison.note)
        if key == self._seen_key and self.current is not None:
            return False
        if self.current is None or snap.run_name != self.current.run or snap.events_file != self._events_file:
            self._events_sent = 0        # another run, or its events trimmed (a resume, an aborted chunk): start over
        self._events_file = snap.events_file
        status = snap.status
        gan = status.gan   # "" before a run: the general primer and healthy lines, no type's own
        new_events = snap.events[self._events_sent:]
        reset = self._events_sent == 0
        self._events_sent = len(snap.events)
        version = (self.current.version + 1) if self.current else 1
        grid_step = _grid_step(snap.grid_path)
        head = {
            "version": version, "run": snap.run_name, "state": status.state,
            "final": status.state in FINAL_STATES, "step": status.step,
            "steps": status.steps, "updated": status.updated, "gan": gan,
            "labels": series_labels(gan), "healthy": views.healthy_lines(gan), "log_scale": log_scale(gan),
            "status_html": status_html(status, snap.run_name, snap.events),
            # A silent trainer's last sign of life: the page counts the seconds since on its own clock.
            "silent_since": status.silent_since,
            "grid": f"live/grid/{snap.run_name}/{grid_step}" if grid_step is not None else None,
            # What D believes about each image of that grid and of the real grid beside it.
            "verdicts": self._verdicts(snap.run_path, grid_step),
            # After a Step while paused: the grid it started from, to set beside the new one.
            "before": ({"step": status.stepped_from,
                        "grid": f"live/grid/{snap.run_name}/{status.stepped_from}",
                        "verdicts": RunDir(snap.run_path).read_verdicts(status.stepped_from)}
                       if status.state == "paused" and status.stepped_from else None),
            "real_grid": (f"live/real/{snap.run_name}" if grid_step is not None
                          and RunDir(snap.run_path).has_real_grid() else None),
            "diagnostics": views.diagnostics_rows(status) if status.state else [],
            # An earlier run beside this one (app/compare.py): its grid at this grid's step, what differs.
            "compare": self._compare_head(compared, snap.run_path, grid_step),
            "compare_note": self.job.comparison.note,
        }
        compare_points = self._compared_points(compared, gan)
        frames, new_frames = self._frames(snap.run_path, reset)
        full = {**head, "reset": True, "marks": settings_marks(snap.events),
                "points": {k: downsample(v) for k, v in {**plot_points(snap.events, gan), **frames}.items()},
                "compare_points": compare_points}
        delta = {**head, "reset": reset, "marks": settings_marks(new_events),
                 "points": {**plot_points(new_events, gan), **(frames if reset else new_frames)}}
        if reset or self._seen_key is None or key[2:4] != self._seen_key[2:4]:
            delta["compare_points"] = compare_points   # the compared run's curves change only with it
        self.current = Rendered(version, _sse(full), _sse(delta), {
            "version": version, "run": snap.run_name, **views.json_safe(status.to_dict()),
            "events": len(snap.events), "last_event": views.json_safe(snap.events[-1]) if snap.events else None,
            "compare": compared.name if compared else None, "compare_note": self.job.comparison.note},
            run=snap.run_name)
        self._seen_key = key
        self.renders += 1
        return True

    async def _watch(self) -> None:
        """Alive while someone watches: with no viewer, the server does no work for the live view."""
        try:
            while self._waiters > 0:
                await self._refresh_and_wake()
                await asyncio.sleep(self.watch_seconds)
        finally:
            self._watcher = None

    async def _join(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self._waiters += 1
        await self._refresh_and_wake()   # fresh on arrival: with nobody watching, no watcher ran
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch())

    def _leave(self) -> None:
        self._waiters -= 1

    async def _next_change(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    # ---- routes ---------------------------------------------------------------------------------
    async def events(self, request):
        from starlette.responses import StreamingResponse

        async def stream():
            await self._join()
            self.viewers += 1
            try:
                sent = self.current
                yield b"retry: 2000\n\n" + sent.full
                self.messages_sent += 1
                while not await request.is_disconnected():
                    if not await self._next_change(KEEPALIVE_SECONDS):
                        yield b": keep-alive\n\n"
                        continue
                    current = self.current
                    if current.version <= sent.version:
                        # Woken by the render this page was sent on joining (the watcher's wake-up
                        # can come after a joining page has already read its result): nothing new.
                        continue
                    # One version behind: the small delta; further (a slow reader): the whole picture.
                    yield current.delta if current.version == sent.version + 1 else current.full
                    self.messages_sent += 1
                    sent = current
            finally:
                self.viewers -= 1
                self._leave()

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def status(self, request):
        """The run's status for scripts: `?since=V` waits until something newer than version V
        exists, at most STATUS_WAIT_SECONDS in all, however often the run changes meanwhile."""
        from starlette.responses import JSONResponse, PlainTextResponse
        since_text = request.query_params.get("since", "")
        since = whole_number(since_text)
        if since_text and since is None:
            return PlainTextResponse("since must be a version: a whole number of at most 12 digits.", status_code=400)
        await self._join()
        try:
            if since is not None:
                deadline = time.monotonic() + STATUS_WAIT_SECONDS
                while self.current.version <= since and (left := deadline - time.monotonic()) > 0:
                    await self._next_change(left)
            return JSONResponse(self.current.status)
        finally:
            self._leave()

    def _compared(self, run: RunDir) -> dict:
        """The compared run's events, grids and config: read once for an earlier run that has ended,
        and again after each status write of one that trains beside the live run (its new events only)."""
        known = self._compared_read
        if known.get("path") == run.path and known["final"]:
            return known
        status = run.read_status()
        if known.get("path") == run.path and known["updated"] == status.updated:
            return known
        if known.get("path") != run.path:
            known = {"path": run.path, "events": [], "offset": 0, "config": None}
        try:
            events, known["offset"] = run.read_events(known["offset"])
            known["config"] = known["config"] or run.read_config()
        except (OSError, ValueError):
            events = []
        known.update(events=known["events"] + events, grids=[s for s, _ in run.grids()],
                     updated=status.updated, final=status.state in FINAL_STATES)
        self._compared_read = known
        return known

    def _compare_head(self, run: RunDir | None, live_path: str, grid_step: int | None) -> dict | None:
        if run is None:
            return None
        compared = self._compared(run)
        steps = compared["grids"]
        # The compared run's grid at the live grid's step (the same fixed noise when the seeds
        # match), else the nearest one before it; its first before the live run has a grid.
        earlier = [s for s in steps if grid_step is not None and s <= grid_step]
        step = earlier[-1] if earlier else (steps[0] if steps else None)
        words, mine, theirs = self._differences(live_path, compared)
        return {"run": run.name, "grid_step": step, "differences": words, "caption": theirs, "own_caption": mine,
                "grid": f"live/grid/{run.name}/{step}" if step is not None else None,
                # What that run's D believed of that grid: its frames, as the live grid has its own.
                "verdicts": run.read_verdicts(step) if step is not None else None}

    def _differences(self, live_path: str, compared: dict) -> tuple[str, str, str]:
        """What differs between the live run's config and the compared run's, in words, and each
        grid's caption by it: worked out again only when the live run's config.json changed (its
        plan written, a settings change)."""
        live = RunDir(live_path)
        try:
            key = (live.path, os.stat(live.file(RunDir.CONFIG)).st_mtime_ns, compared["path"])
            if self._differences_said[0] != key:
                there, here = compared["config"], live.read_config()
                said = ((views.differences_words(here, there), *views.differences_captions(here, there)) if there
                        else ("", "", ""))
                self._differences_said = (key, said)
        except (OSError, ValueError):
            return "", "", ""
        return self._differences_said[1]

    def _compared_points(self, run: RunDir | None, gan: str) -> dict:
        """The compared run's curves, drawn dashed on the live run's charts (its series of this run's GAN type)."""
        if run is None:
            return {}
        return {k: downsample(v) for k, v in plot_points(self._compared(run)["events"], gan).items()}

    def _verdicts(self, run_path: str, step: int | None) -> dict | None:
        """The grid's verdicts file, read once per grid (a render happens on every change); read
        again until it exists (the trainer writes it just after the grid)."""
        if step is None:
            return None
        key = (run_path, step)
        if self._verdicts_read[0] != key or self._verdicts_read[1] is None:
            self._verdicts_read = (key, RunDir(run_path).read_verdicts(step))
        return self._verdicts_read[1]

    def _frames(self, run_path: str, reset: bool) -> tuple[dict, dict]:
        """The frames' points of every grid of the run so far, and those new since the last render:
        each grid's verdicts file read once (the folder listed again only when a grid was added)."""
        known = self._frames_read
        if reset or known.get("path") != run_path:
            known = self._frames_read = {"path": run_path, "steps": set(), "points": {}, "listed": -1}
        run = RunDir(run_path)
        new: dict[str, list] = {}
        try:
            count = len(os.listdir(run.grids_folder)) if run_path else 0
        except OSError:
            count = 0
        if count != known["listed"]:
            known["listed"] = count
            for step, _ in run.grids():
                if step in known["steps"]:
                    continue
                points = frame_points(step, run.read_verdicts(step))
                if not points:
                    known["listed"] = -1   # its verdicts are not written yet: look again next time
                    continue
                known["steps"].add(step)
                for key, values in points.items():
                    new.setdefault(key, []).extend(values)
                    known["points"].setdefault(key, []).extend(values)
        return known["points"], new

    async def grid(self, request):
        """A grid image of the current run or of the run compared with it (the runs a page shows)."""
        step = whole_number(request.path_params["step"])
        return self._grid_file(request.path_params["run"], None if step is None else RunDir.grid_name(step))

    async def real_grid(self, request):
        """The current run's real images, shown beside its fakes with D's verdicts."""
        return self._grid_file(request.path_params["run"], RunDir.REAL_GRID)

    def _grid_file(self, run: str, name: str | None):
        """Only a regular file in a shown run's own grids/ folder, never one a link there points to."""
        from starlette.responses import FileResponse, Response
        shown = [r for r in (self.job.run, self.job.comparison.run) if r is not None and r.name == run]
        if not shown or name is None:
            return Response(status_code=404)
        folder = shown[0].grids_folder
        path = os.path.join(folder, name)
        try:
            regular = stat.S_ISREG(os.lstat(path).st_mode) and not os.path.islink(folder)
        except OSError:
            regular = False
        if not regular:
            return Response(status_code=404)
        return FileResponse(path, media_type="image/png",
                            headers={"Cache-Control": "public, max-age=31536000, immutable"})

    async def stats(self, request):
        from starlette.responses import JSONResponse
        return JSONResponse({"renders": self.renders, "messages_sent": self.messages_sent, "viewers": self.viewers,
                             "version": self.current.version if self.current else 0})

    def routes(self) -> list:
        from starlette.routing import Route
        return [Route("/live/events", self.events), Route("/live/status", self.status),
                Route("/live/grid/{run}/{step}", self.grid), Route("/live/real/{run}", self.real_grid),
                Route("/live/stats", self.stats)]


def whole_number(text: str, digits: int = 12) -> int | None:
    """A URL's number, or None: ASCII digits only (str.isdigit also takes '²', which int() refuses,
    and int() refuses more than 4,300 digits), and few enough for any real version or step."""
    return int(text) if re.fullmatch(rf"[0-9]{{1,{digits}}}", text or "") else None


def live_grid_url(snap) -> str | None:
    """The newest grid of a snapshot as its URL on this server (live/grid/RUN/STEP), never its path."""
    step = _grid_step(snap.grid_path)
    return f"live/grid/{snap.run_name}/{step}" if step is not None else None


def _grid_step(path: str | None) -> int | None:
    match = re.search(r"step_(\d+)\.png$", path or "")
    return int(match.group(1)) if match else None
