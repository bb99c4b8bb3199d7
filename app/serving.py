"""The HTTP server's last mile.

A connection that has not sent a whole request's headers within REQUEST_HEADERS_SECONDS is closed. uvicorn (which Gradio's launch starts) waits for them forever,
so a slow or silent client could hold a socket and its protocol object for as long as it liked
(300 such clients were all held open). A request whose headers arrived is never cut: a page's
event stream or a long poll lasts as long as it needs.

An image output is written into Gradio's cache whole, once (see write_cached_images_whole).

    close_slow_requests()         # before demo.launch()
    write_cached_images_whole()
"""
from __future__ import annotations

import collections
import hashlib
import os
import threading
from pathlib import Path

from uvicorn.protocols.http.auto import AutoHTTPProtocol

REQUEST_HEADERS_SECONDS = 10.0
KNOWN_IMAGES = 256      # image outputs remembered by their pixels (a few dozen bytes each)


def close_slow_requests() -> None:
    """Have uvicorn's 'auto' HTTP protocol (Gradio's choice) be the timed one below."""
    import uvicorn.config
    uvicorn.config.HTTP_PROTOCOLS["auto"] = f"{__name__}:TimedHTTPProtocol"


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


def write_cached_images_whole() -> None:
    """Gradio writes an image output to `<cache>/<hash of its bytes>/image.webp` in place, every
    time: two viewers given the same picture at once (the dataset preview on every page load, seed
    0's samples) rewrite the file while it is served to the other, who gets a cut-off response
    ("received 0 bytes, expected 5790"; lab/README.md, "History: The UI process's memory"). Here it is
    written under a temporary name and renamed into place, and an existing copy is reused (touched,
    since Gradio's delete_cache ages files by time), as Gradio already does for files. A picture
    already written is not encoded again."""
    from gradio import processing_utils
    written: collections.OrderedDict = collections.OrderedDict()   # what the pixels were -> their file
    lock = threading.Lock()

    def save_pil_to_cache(img, cache_dir, name: str = "image", format: str = "webp") -> str:
        # The same picture again (a room's identical samples, the preview on every page load) is
        # found by its pixels: hashing them costs a fraction of encoding it again.
        pixels = hashlib.sha256(img.tobytes())
        pixels.update(repr((img.mode, img.size, img.getpalette(), str(cache_dir), name, format)).encode())
        with lock:
            known = written.get(pixels.digest())
        if known and _touched(known):
            return known
        data = processing_utils.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / processing_utils.hash_bytes(data)
        folder.mkdir(exist_ok=True, parents=True)
        path = (folder / f"{name}.{format}").resolve()
        if not _touched(str(path)):
            partial = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
            partial.write_bytes(data)
            os.replace(partial, path)
        with lock:
            written[pixels.digest()] = str(path)
            while len(written) > KNOWN_IMAGES:
                written.popitem(last=False)
        return str(path)
    processing_utils.save_pil_to_cache = save_pil_to_cache


def _touched(path: str) -> bool:
    """Whether the file is there, touched if so (Gradio's delete_cache ages files by time)."""
    try:
        os.utime(path)
        return True
    except OSError:
        return False
