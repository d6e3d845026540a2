"""A local control socket: one JSON request line in, one JSON reply line out.

The supervisor's (``rideout chaos`` through a running ``rideout up``) and the network
lab's WAN links (:mod:`rideout.lab.relay`) are served this way. The socket is mode 0600,
so the filesystem's permissions are the credential: only its owner can connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["READ_TIMEOUT", "serve_json_lines"]

READ_TIMEOUT = 5.0
"""Seconds a connection has to send its request line before it is closed."""


async def serve_json_lines(
    path: Path, command: Callable[[bytes], Awaitable[dict[str, Any]]]
) -> asyncio.Server:
    """Serve `command` on the Unix socket `path` (a stale one is replaced; mode 0600):
    each connection sends one line, gets `command`'s reply as one JSON line, and is
    closed. A connection that sends nothing within :data:`READ_TIMEOUT`, or goes away,
    is closed without a word."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT)
            reply = await command(line)
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = await asyncio.start_unix_server(handle, path=str(path))
    os.chmod(path, 0o600)
    return server
