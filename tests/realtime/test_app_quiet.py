"""What a client without a credential can make a server log: at most one line below
ERROR, never a traceback. A client that goes away mid-body (the waiting room's
``/assign_queue_num`` and ``/generate_token``, keyed or not, the demo sign-in, the
control plane's ``/v1/metrics`` before its signature is checked) and a WebSocket text
frame of invalid UTF-8, on real servers over real sockets."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Callable

from rideout.config import Config
from rideout.controlplane.app import create_app as control_plane_app
from tests.conftest import serving
from tests.realtime.conftest import Deployment
from tests.waitingroom.test_extension import room_config, two_regions


class Records(logging.Handler):
    """Every record of rideout's and uvicorn's loggers while attached (uvicorn's do not
    reach the root logger, so pytest's caplog misses them)."""

    LOGGERS = ("", "uvicorn", "uvicorn.error")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        # A record of "uvicorn.error" reaches this handler on each logger it passes.
        if not any(seen is record for seen in self.records):
            self.records.append(record)

    def __enter__(self) -> Records:
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.ERROR or r.exc_info]

    def gone(self) -> list[logging.LogRecord]:
        return [r for r in self.records if "went away" in r.getMessage()]


async def gone_mid_body(host: str, port: int, path: str, *headers: str) -> None:
    """POST to `path` with a body of 500 bytes declared, send 10, and go away."""
    _reader, writer = await asyncio.open_connection(host, port)
    head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Length: 500",
            "Content-Type: application/json", *headers]  # fmt: skip
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + b'{"event_id')
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    await writer.wait_closed()


async def test_a_client_gone_mid_body_logs_no_traceback(
    make_config: Callable[..., Config],
) -> None:
    config = room_config(make_config)
    zone = config.primary.zones[0]
    cp = config.control_plane
    origin = f"Origin: http://{zone.address}:{config.app_port}"
    async with (
        two_regions(config),
        serving(control_plane_app(config), cp.address, cp.port),
    ):
        with Records() as logged:
            logging.getLogger("rideout").setLevel(logging.INFO)
            for path, headers in [
                ("/assign_queue_num", ()),
                ("/assign_queue_num", ("Idempotency-Key: k1",)),
                ("/generate_token", ()),
                ("/auth/demo-token", (origin,)),
            ]:
                await gone_mid_body(zone.address, config.app_port, path, *headers)
            await gone_mid_body(cp.address, cp.port, "/v1/metrics")
            await asyncio.sleep(0.5)
    assert logged.tracebacks() == []
    assert len(logged.gone()) <= 5
    assert all(record.levelno <= logging.WARNING for record in logged.gone())


def _frame(opcode: int, payload: bytes) -> bytes:
    """One masked client frame (RFC 6455 §5.2), payload under 126 bytes."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


async def test_a_text_frame_of_invalid_utf8_is_closed_without_a_traceback(
    deployment: Deployment,
) -> None:
    host, port = deployment.urls["a1"].removeprefix("ws://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /ws?token={deployment.token()} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101"), head
    with Records() as logged:
        writer.write(_frame(0x1, b"\xff\xfe not utf-8"))
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(64), 5)
        writer.close()
        await asyncio.sleep(0.5)
    assert answer[:1] == b"\x88", answer  # a close frame
    code = int.from_bytes(answer[2:4], "big")
    assert code == 1007, code  # invalid frame payload data
    assert logged.tracebacks() == []
    # One line at WARNING at most: nothing an anonymous client can multiply.
    warnings = [r.getMessage() for r in logged.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= 1, warnings
