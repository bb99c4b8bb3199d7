"""The bound on Gradio's upload route (app/serving.py UploadLimits) as ASGI runs it, in one event
loop, so that an upload still arriving is held exactly as long as the test says: the room's
uploads fill the room's share and never the host's; a keyless copy nobody used goes within a
minute, the host's stays for its event. (Through the running app: tests/app/test_guard.py.)"""
from __future__ import annotations

import asyncio
import json

from app import serving
from app.serving import HOST_COOKIE, UploadLimits

ROUTE = "/gradio_api/upload"


def test_the_hosts_upload_has_a_share_no_keyless_flood_can_take_and_unused_keyless_copies_go_soon(
        tmp_path, monkeypatch):
    monkeypatch.setattr(serving, "ROOM_UPLOAD_KEEP_SECONDS", 0.0)   # the room's: at the loop's next turn

    async def gradio_upload(scope, receive, send):
        """What Gradio's upload route answers: the path of the copy it wrote, once the body is in."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        copy = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        copy.write_bytes(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps([str(copy)]).encode()})

    limits = UploadLimits(gradio_upload, max_bytes=1000, host_bytes=500, host_key="the key")
    host = f"{HOST_COOKIE}=the%20key".encode()

    async def upload(size: int, cookie: bytes = b"", arrived: asyncio.Event | None = None) -> int:
        headers = [(b"content-length", str(size).encode())] + ([(b"cookie", cookie)] if cookie else [])
        scope = {"type": "http", "method": "POST", "path": ROUTE, "headers": headers, "client": ("127.0.0.1", 4242)}
        statuses = []

        async def receive():
            if arrived is not None:
                await arrived.wait()
            return {"type": "http.request", "body": b"x" * size, "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
        await limits(scope, receive, send)
        return statuses[0]

    async def lesson():
        bytes_coming = asyncio.Event()
        flood = asyncio.create_task(upload(1000, arrived=bytes_coming))   # states the room's whole share
        await asyncio.sleep(0)   # it runs until it waits for its bytes: in flight from here
        assert await upload(100) == 413                                # the room's share is full
        assert await upload(100, cookie=b"blink-host-key=a guess") == 413
        assert await upload(400, cookie=host) == 200                   # the host's dataset goes in beside it
        assert await upload(200, cookie=host) == 413                   # and no more than the host's share
        bytes_coming.set()
        assert await flood == 200
        await asyncio.sleep(0)   # the room's copy's expiry runs
        kept = sorted(p.stat().st_size for p in tmp_path.iterdir())
        assert kept == [400], kept   # the flood's unused copy has gone; the host's stays for its event
    asyncio.run(lesson())
