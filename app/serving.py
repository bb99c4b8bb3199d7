"""The HTTP server's last mile: a connection that has not sent a whole request's headers within
REQUEST_HEADERS_SECONDS is closed. uvicorn (which Gradio's launch starts) waits for them forever,
so a slow or silent client could hold a socket and its protocol object for as long as it liked
(300 such clients were all held open). A request whose headers arrived is never cut: a page's
event stream or a long poll lasts as long as it needs.

    close_slow_requests()   # before demo.launch()
"""
from __future__ import annotations

from uvicorn.protocols.http.auto import AutoHTTPProtocol

REQUEST_HEADERS_SECONDS = 10.0


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
