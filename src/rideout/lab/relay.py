"""The lab's WAN link: a TCP relay that delays, loses or holds traffic, in the manner of
Toxiproxy (this kernel has no ``tc netem``, so latency is made in userspace).

A :class:`Link` listens on one address and forwards every connection to one upstream
address; each direction (``up``: from the client to the upstream, ``down``: back) has
its own :class:`Toxics`, changeable at runtime without dropping a connection:

- ``latency`` (+ up to ``jitter`` more, uniformly): every chunk is delivered that long
  after it was read, never before the chunk read before it (byte order is kept);
- ``loss`` with ``loss_mode``: for each chunk read, the probability that the connection
  is lost: ``timeout`` stalls it both ways (nothing more is delivered, as Toxiproxy's
  timeout toxic with no timeout), ``reset`` resets both ends (a TCP RST, as reset_peer);
- ``bandwidth`` (bytes per second, 0 for none): each write is followed by its time at
  that rate;
- ``stopped``: nothing is delivered (silence), and once the buffer of
  :data:`BUFFERED_CHUNKS` chunks is full nothing more is read, so the sender's TCP
  window closes; every byte held is delivered, in order, when it is resumed.

**How inter-region traffic goes through it.** A link runs in the caller's process; its
listener and its upstream connections can each be opened in any lab namespace (``netns``
and ``upstream_netns``: a short-lived thread enters the namespace, makes the socket and
leaves). For the WAN between regions, the router holds one listener per remote service
at a relay address in that service's region (:meth:`Topology.relay_address
<rideout.lab.topology.Topology.relay_address>`, ``127.100.G.200`` and up, on the
router's loopback), and what runs in another region is given that address instead of
the service's own: its traffic crosses the router to the relay, which forwards it to
the service. Because the relay address is in the destination region's prefix, a
partition of the two regions cuts relayed traffic as it cuts direct traffic.

Control: :meth:`Link.set_toxics` in the process that runs the link, or a Unix socket
(:func:`serve_control`, one JSON line in, one out) created mode 0600 in a directory of
mode 0700, so only the lab's owner can change a link (:func:`send_control`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import random
import socket
import struct
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from rideout import _validate
from rideout._control_socket import serve_json_lines
from rideout._json import decode_object
from rideout.errors import InvalidArgument
from rideout.lab.errors import LabError

__all__ = [
    "BUFFERED_CHUNKS",
    "DIRECTIONS",
    "LOSS_MODES",
    "Link",
    "Toxics",
    "delivery_time",
    "send_control",
    "serve_control",
    "socket_in",
]

DIRECTIONS = ("up", "down")
LOSS_MODES = ("timeout", "reset")
BUFFERED_CHUNKS = 64  # per direction and connection, of up to 64 KiB each
_CHUNK = 65536
_CLONE_NEWNET = 0x40000000
_IP_TRANSPARENT = 19  # linux/in.h; not in Python's socket module

T = TypeVar("T")


@dataclass(frozen=True)
class Toxics:
    """What one direction of a link does to its bytes (see the module docstring)."""

    latency: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    loss_mode: str = "timeout"
    bandwidth: int = 0
    stopped: bool = False

    def __post_init__(self) -> None:
        _validate.seconds("latency", self.latency, zero_ok=True)
        _validate.seconds("jitter", self.jitter, zero_ok=True)
        loss = _validate.number("loss", self.loss)
        if not 0 <= loss <= 1:
            raise InvalidArgument(f"loss must be a probability from 0 to 1, not {self.loss!r}")
        _validate.choice("loss_mode", self.loss_mode, LOSS_MODES)
        _validate.count("bandwidth", self.bandwidth)
        if not isinstance(self.stopped, bool):
            raise InvalidArgument(f"stopped must be true or false, not {self.stopped!r}")


def delivery_time(now: float, previous: float, toxics: Toxics, draw: float) -> float:
    """When a chunk read at `now` is delivered: after its latency and its share of the
    jitter (`draw` in [0, 1)), and never before the chunk before it (`previous`)."""
    return max(previous, now + toxics.latency + toxics.jitter * draw)


def socket_in(netns: str | None, make: Callable[[], T]) -> T:
    """`make()` run inside network namespace `netns` (here if None): a socket it makes
    stays in that namespace. A thread of its own enters the namespace and ends."""
    if netns is None:
        return make()
    made: list[T] = []
    failed: list[BaseException] = []

    def enter() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, f"setns into {netns}: {os.strerror(errno)}")
            finally:
                os.close(fd)
            made.append(make())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=enter, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def _listener(address: tuple[str, int], transparent: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if transparent:  # bind an address that is not this namespace's, and answer from it
            sock.setsockopt(socket.SOL_IP, _IP_TRANSPARENT, 1)
        sock.bind(address)
        sock.listen(512)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _client_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


class _Connection:
    """One relayed connection: its two streams and whether it was lost."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.writers = {"up": upstream, "down": client}
        self.stalled = False

    def reset(self) -> None:
        for writer in self.writers.values():
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


class Link:
    """A relay from `listen` (in `netns`) to `upstream` (reached from `upstream_netns`);
    see the module docstring. `clock`, `sleep` and `rng` are injectable.

    `transparent` (root): listen on an address that is not `netns`' own, the address of
    the service itself, to which :meth:`Lab.intercept <rideout.lab.netns.Lab.intercept>`
    steers one group's traffic: clients keep the service's address, and only the
    intercepted ones cross the link (``IP_TRANSPARENT``)."""

    def __init__(
        self,
        name: str,
        listen: tuple[str, int],
        upstream: tuple[str, int],
        *,
        netns: str | None = None,
        upstream_netns: str | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
        connect_timeout: float = 10.0,
        transparent: bool = False,
    ) -> None:
        self.name = name
        self.transparent = transparent
        self.listen = listen
        self.upstream = upstream
        self.netns = netns
        self.upstream_netns = upstream_netns
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._connect_timeout = connect_timeout
        self._toxics = {d: Toxics() for d in DIRECTIONS}
        self._flowing = {d: asyncio.Event() for d in DIRECTIONS}
        for event in self._flowing.values():
            event.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[_Connection] = set()
        self.connections_total = 0

    @property
    def toxics(self) -> dict[str, Toxics]:
        return dict(self._toxics)

    @property
    def address(self) -> tuple[str, int]:
        """Where the link listens (the port the kernel chose if `listen` had port 0)."""
        if self._server is None or not self._server.sockets:
            return self.listen
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    def set_toxics(self, direction: str = "both", **changes: Any) -> dict[str, Toxics]:
        """Change the toxics of `direction` (``up``, ``down`` or ``both``) by the given
        fields (``latency=0.035``, ``stopped=True``); every toxic now in force. Open
        connections keep flowing under the new values."""
        _validate.choice("direction", direction, (*DIRECTIONS, "both"))
        unknown = set(changes) - set(Toxics.__dataclass_fields__)
        if unknown:
            raise InvalidArgument(f"no toxic {', '.join(sorted(unknown))}")
        targets = DIRECTIONS if direction == "both" else (direction,)
        updated = {d: replace(self._toxics[d], **changes) for d in targets}  # validates all
        for d, toxics in updated.items():
            self._toxics[d] = toxics
            if toxics.stopped:
                self._flowing[d].clear()
            else:
                self._flowing[d].set()
        return self.toxics

    def reset_toxics(self) -> None:
        """No toxics in either direction."""
        self.set_toxics("both", **asdict(Toxics()))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._server is not None:
            raise LabError(f"link {self.name} is already started")
        try:
            sock = socket_in(self.netns, lambda: _listener(self.listen, self.transparent))
        except OSError as exc:
            raise LabError(f"link {self.name} cannot listen on {self.listen}: {exc}") from None
        self._server = await asyncio.start_server(self._serve, sock=sock, limit=_CHUNK)

    async def stop(self) -> None:
        """Close the listener and every relayed connection."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            for writer in conn.writers.values():
                writer.transport.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Link:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ relaying

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The relaying runs in a task of its own, which stop() cancels; this one, the
        # connection callback's, only waits for it. Python 3.11 logs a traceback for a
        # connection callback whose own task is cancelled (streams.py asks a cancelled
        # task for its exception), which every stop with a live connection printed.
        await asyncio.wait({self._spawn(self._relay(reader, writer))})

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sock = socket_in(self.upstream_netns, _client_socket)
            try:
                loop = asyncio.get_running_loop()
                await asyncio.wait_for(
                    loop.sock_connect(sock, self.upstream), self._connect_timeout
                )
            except BaseException:
                sock.close()
                raise
            up_reader, up_writer = await asyncio.open_connection(sock=sock, limit=_CHUNK)
        except (OSError, TimeoutError):
            writer.transport.abort()  # the upstream cannot be reached: nor can the link
            return
        conn = _Connection(writer, up_writer)
        self._connections.add(conn)
        self.connections_total += 1
        try:
            await asyncio.gather(
                self._pump("up", reader, conn), self._pump("down", up_reader, conn)
            )
        finally:
            self._connections.discard(conn)
            for w in conn.writers.values():
                if conn.stalled:
                    w.transport.abort()
                else:
                    w.close()

    async def _pump(self, direction: str, source: asyncio.StreamReader, conn: _Connection) -> None:
        """Read one direction, schedule each chunk, deliver it in order."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(BUFFERED_CHUNKS)
        deliver = self._spawn(self._deliver(direction, queue, conn))
        previous = 0.0
        try:
            while True:
                try:
                    data = await source.read(_CHUNK)
                except OSError:
                    data = b""
                toxics = self._toxics[direction]
                if data and toxics.loss and self._rng() < toxics.loss:
                    if toxics.loss_mode == "reset":
                        conn.reset()
                        return
                    conn.stalled = True
                if conn.stalled:
                    if not data:  # an end closed: so does the stalled connection
                        for writer in conn.writers.values():
                            writer.transport.abort()
                        return
                    continue  # read and dropped: silence
                previous = delivery_time(self._now(), previous, toxics, self._rng())
                await queue.put((previous, data))
                if not data:
                    break
            await deliver
        finally:
            deliver.cancel()

    async def _deliver(
        self, direction: str, queue: asyncio.Queue[tuple[float, bytes]], conn: _Connection
    ) -> None:
        writer = conn.writers[direction]
        while True:
            at, data = await queue.get()
            delay = at - self._now()
            if delay > 0:
                await self._sleep(delay)
            await self._flowing[direction].wait()
            if conn.stalled:
                return
            try:
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
            except OSError:
                return
            bandwidth = self._toxics[direction].bandwidth
            if bandwidth:
                await self._sleep(len(data) / bandwidth)


# --------------------------------------------------------------------------- control


async def serve_control(path: Path, links: Mapping[str, Link]) -> asyncio.Server:
    """Serve `links`' toxics on the Unix socket `path`, made mode 0600 in a directory
    this makes mode 0700 (the owner's filesystem permissions are the credential).

    Requests, one JSON line each: ``{"op": "show"}`` and ``{"op": "set", "link": NAME,
    "direction": "up"|"down"|"both", "toxics": {...}}``; each answers
    ``{"ok": true, "links": {NAME: {"up": {...}, "down": {...}}}}`` or
    ``{"ok": false, "error": ...}``.
    """
    # The directory (0700) keeps others out from the socket's first moment; 0600 besides.
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.parent.chmod(0o700)

    def show() -> dict[str, Any]:
        return {
            name: {d: asdict(t) for d, t in link.toxics.items()} for name, link in links.items()
        }

    async def command(line: bytes) -> dict[str, Any]:
        try:
            request = decode_object(line)  # strict: one object, no duplicate keys
            if request["op"] == "set":
                link = links[request["link"]]
                link.set_toxics(request.get("direction", "both"), **request["toxics"])
            elif request["op"] != "show":
                raise ValueError(f"unknown op {request['op']!r}")
        except (ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return {"ok": True, "links": show()}

    return await serve_json_lines(path, command)


async def send_control(path: Path, request: Mapping[str, Any], timeout: float = 10.0) -> Any:
    """One request to a link's control socket (see :func:`serve_control`); its reply's
    ``links``, or LabError with its error."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), timeout)
    except (OSError, TimeoutError) as exc:
        raise LabError(f"cannot reach the link control socket {path}: {exc}") from None
    try:
        writer.write(json.dumps(dict(request)).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
    finally:
        writer.close()
    try:
        reply = decode_object(line)
    except ValueError:
        raise LabError(f"{path} answered {line!r}") from None
    if not reply.get("ok"):
        raise LabError(f"{path}: {reply.get('error')}")
    return reply["links"]
