"""rideout's authoritative DNS server: UDP and TCP on one address, dnslib for the packets.

The answers come from an injected resolver, ``(qname, qtype) -> resolution``, asked
through :func:`rideout.dns.query.answer_query` (shared with DoH). Without a
``generation`` it is called for every query; with one (a value that changes whenever the
answers may, such as the DNS view), each distinct question is resolved and encoded once
per generation and later queries are answered from those bytes (`rideout.dns.wire`),
so a failover still shows in the first answer after the view changed. The resolution
has ``rcode`` (``"NOERROR"``, ``"NXDOMAIN"``, ``"REFUSED"``), ``answers`` and
``authority`` as ``(name, type, ttl, value)`` tuples (see `rideout.dns.records`).

Conduct on the wire (RFC 1035, 2181, 6891, 7766):

- Answers are authoritative (AA) for NOERROR and NXDOMAIN; REFUSED and SERVFAIL are
  not. RD and CD are copied, RA is never set (no recursion here). The question is
  echoed byte for byte, so a client's case randomisation (0x20) round-trips, and an
  answer owned by the query name carries the query's spelling.
- Names are compared without regard to ASCII case: the resolver gets them lowercased,
  without the trailing dot (the root is ``"."``).
- Nothing a client sends can stop the server. A datagram too short for a header, or a
  response (QR=1), is dropped: answering a response invites two servers to bounce
  errors at each other. A header we can read but a message we cannot gets FORMERR (no
  question, the id and opcode copied), as do messages with other than one question,
  records in the answer or authority section, more than two additional records, more
  than one OPT record, a name over 255 octets or a label over 63. Opcodes other than
  QUERY get NOTIMP, an EDNS version other than 0 gets BADVERS. Classes other than IN
  (and ANY) and zone transfers are REFUSED; a resolver error is SERVFAIL.
- A UDP answer larger than the client can take (512 octets, or its EDNS0 size, capped at
  ``max_udp_payload``) is sent with its records removed and TC=1, and the client retries
  over TCP, where a message can be 65,535 octets.
- TCP: 2-octet length prefix, any number of queries per connection, answered in order.
  The app servers' rule holds (:mod:`rideout._guard`'s :class:`~rideout._guard.Guard`):
  a connection is closed when it sends nothing whole for ``tcp_idle_timeout`` seconds (a
  new connection's first query included; a half-sent message counts as nothing), or when
  its framing is broken; at ``max_tcp_connections`` a new connection pushes out the one
  that has waited longest for its next query, so silent sockets cannot keep queries
  out, and only with none waiting (all being answered) is the new one closed at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, Self

from dnslib import (
    AAAA,
    CNAME,
    EDNS0,
    NS,
    QTYPE,
    RR,
    SOA,
    TXT,
    A,
    DNSHeader,
    DNSLabel,
    DNSQuestion,
    DNSRecord,
)

from rideout._guard import Guard, ServerLimits
from rideout.dns.metrics import DnsMetrics
from rideout.dns.query import (
    CLASS_ANY,
    CLASS_IN,
    OPT,
    QueryResult,
    Resolver,
    answer_query,
    normalize_name,
    qtype_name,
    qtype_number,
    rcode_number,
    wire_length,
)
from rideout.dns.wire import MIN_UDP_PAYLOAD, Template, TemplateCache, read_query

__all__ = ["DnsMetrics", "DnsServer"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- packets

_HEADER: Final = struct.Struct("!HHHHHH")
_QR: Final = 0x8000
_RD: Final = 0x0100
_CD: Final = 0x0010
_MIN_UDP: Final = MIN_UDP_PAYLOAD
_MAX_TCP: Final = 65535


def _rdata(rtype: str, value: str) -> Any:
    if rtype == "A":
        return A(value)
    if rtype == "AAAA":
        return AAAA(value)
    if rtype == "TXT":
        data = value.encode("utf-8")
        return TXT([data[i : i + 255] for i in range(0, len(data), 255)] or [b""])
    if rtype == "SOA":
        mname, rname, *times = value.split()
        if len(times) != 5:
            raise ValueError(
                f"SOA needs 'mname rname serial refresh retry expire minimum': {value!r}"
            )
        return SOA(mname, rname, tuple(int(t) for t in times))
    if rtype == "NS":
        return NS(value)
    if rtype == "CNAME":
        return CNAME(value)
    raise ValueError(f"cannot encode {rtype} records")  # pragma: no cover - _records checks


def _header_only(ident: int, flags: int, rcode: str) -> bytes:
    """A question-less error reply: id, opcode and RD copied from the query."""
    out = _QR | (flags & 0x7800) | (flags & _RD) | rcode_number(rcode)
    return _HEADER.pack(ident, out, 0, 0, 0, 0)


@dataclass(slots=True)
class _Reply:
    """An answer to one message; `packet` is None when nothing is to be sent."""

    packet: bytes | None
    qtype: str | None = None
    rcode: str = ""
    drop_reason: str = ""
    truncated: bool = False


class DnsServer:
    """Authoritative DNS over UDP and TCP on ``host:port`` (``port=0``: any free port).

    ::

        async with DnsServer(resolver, "127.0.0.1", 5300) as server:
            ...  # server.port is the bound port

    Given `generation`, a function whose value changes (by ``==``) whenever the
    resolver's answers may change (a new DNS view), the server answers from precomputed
    replies (`rideout.dns.wire`): each distinct question is resolved and encoded once per
    generation, then answered by copying its id and question into the cached bytes.
    `warm` lists ``(name, type)`` questions to precompute as soon as a generation starts.
    Without `generation` every query asks the resolver.

    UDP is read until the socket is empty on every wakeup (at most `udp_batch` datagrams
    before other work gets a turn), replies are sent at once without waiting, and the
    socket asks the kernel for a `udp_receive_buffer` large enough to hold a herd of
    queries (the kernel caps it at ``net.core.rmem_max``; `udp_receive_buffer_granted`
    says what it gave).
    """

    def __init__(
        self,
        resolver: Resolver,
        host: str = "127.0.0.1",
        port: int = 53,
        *,
        metrics: DnsMetrics | None = None,
        max_udp_payload: int = 1232,
        max_tcp_connections: int = 256,
        tcp_idle_timeout: float = 10.0,
        generation: Callable[[], object] | None = None,
        warm: Sequence[tuple[str, str]] = (),
        max_cached_answers: int = 10_000,
        udp_receive_buffer: int = 8 << 20,
        udp_batch: int = 256,
    ) -> None:
        if max_udp_payload < _MIN_UDP:
            raise ValueError(f"max_udp_payload must be at least {_MIN_UDP}")
        self.resolver = resolver
        self.host = host
        self._requested_port = port
        self.metrics = metrics
        self.max_udp_payload = max_udp_payload
        self.max_tcp_connections = max_tcp_connections
        self.tcp_idle_timeout = tcp_idle_timeout
        self._guard = Guard(
            ServerLimits(handshake_timeout=tcp_idle_timeout, max_connections=max_tcp_connections)
        )
        self.udp_receive_buffer = udp_receive_buffer
        self.udp_batch = udp_batch
        self.udp_receive_buffer_granted: int | None = None
        self.cache: TemplateCache | None = None
        if generation is not None:
            rebuilt = None if metrics is None else metrics.cache_rebuilds.inc
            self.cache = TemplateCache(
                generation, self._build, max_entries=max_cached_answers, on_rebuild=rebuilt
            )
            if metrics is not None:
                cache = self.cache
                metrics.cached_answers.set_function(lambda: len(cache))
        self._warm = [_warm_key(name, qtype) for name, qtype in warm]
        self._udp: _UdpEndpoint | None = None
        self._tcp: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        if self._port is None:
            raise RuntimeError("DnsServer is not started")
        return self._port

    @property
    def running(self) -> bool:
        return self._udp is not None

    def udp_socket_inode(self) -> int | None:
        """The inode of the UDP socket (how /proc/net/udp names it); None when stopped."""
        return None if self._udp is None else self._udp.inode

    async def start(self) -> None:
        """Bind UDP and TCP on the same port; OSError when that is impossible."""
        if self._udp is not None:
            raise RuntimeError("DnsServer is already started")
        loop = asyncio.get_running_loop()
        attempts = 10 if self._requested_port == 0 else 1
        for attempt in range(attempts):
            udp = self._bind_udp(loop, self._requested_port)
            port = udp.port
            try:
                tcp = await asyncio.start_server(
                    self._serve_tcp, self.host, port, reuse_address=True, backlog=128
                )
            except OSError:
                udp.close()
                if attempt == attempts - 1:
                    raise
                continue
            self._udp, self._tcp, self._port = udp, tcp, port
            self.warm()
            logger.info(
                "DNS server on %s:%d (UDP and TCP; UDP receive buffer %d octets)",
                self.host, port, self.udp_receive_buffer_granted or 0,
            )  # fmt: skip
            return

    def _bind_udp(self, loop: asyncio.AbstractEventLoop, port: int) -> _UdpEndpoint:
        family, kind, proto, _, address = socket.getaddrinfo(
            self.host, port, type=socket.SOCK_DGRAM
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            self.udp_receive_buffer_granted = _grow_receive_buffer(sock, self.udp_receive_buffer)
            if self.metrics is not None:
                self.metrics.udp_receive_buffer.set(self.udp_receive_buffer_granted)
            sock.bind(address)
            return _UdpEndpoint(self, sock, loop)
        except BaseException:
            sock.close()
            raise

    def warm(self) -> None:
        """Precompute the `warm` questions' replies for the generation in force."""
        if self.cache is not None and self._warm:
            self.cache.warm(self._warm)

    async def stop(self) -> None:
        """Close both listeners and every open TCP connection."""
        udp, tcp, self._udp, self._tcp = self._udp, self._tcp, None, None
        if udp is not None:
            udp.close()
        if tcp is not None:
            tcp.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if tcp is not None:
            await tcp.wait_closed()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------ messages

    def handle(self, data: bytes, transport: Literal["udp", "tcp"]) -> bytes | None:
        """The reply to one DNS message, or None to send nothing. Never raises."""
        cache = self.cache
        return self._answer(data, transport, None if cache is None else cache.current())

    def _answer(
        self,
        data: bytes,
        transport: Literal["udp", "tcp"],
        templates: dict[bytes, Template | None] | None,
    ) -> bytes | None:
        """`handle` with the templates of the generation in force (None: no cache)."""
        if templates is not None:
            assert self.cache is not None
            query = read_query(data)
            template = None if query is None else self.cache.lookup(query, templates)
            if template is not None:
                assert query is not None
                limit = _MAX_TCP
                if transport == "udp":
                    limit = _MIN_UDP
                    if query.edns:
                        limit = max(_MIN_UDP, min(query.udp_size, self.max_udp_payload))
                packet, truncated = template.reply(data, query.name_end, limit)
                if self.metrics is not None:
                    self.metrics.query(template.qtype, template.rcode, transport, "cache")
                    if truncated:
                        self.metrics.truncated.labels(transport).inc()
                return packet
        try:
            reply = self._handle(data, transport)
        except Exception:  # a bug, not the client's fault: say SERVFAIL if we can
            logger.exception("DNS server failed on a %s message", transport)
            reply = _Reply(None, drop_reason="error")
            if len(data) >= _HEADER.size:
                ident, flags = struct.unpack_from("!HH", data)
                reply = _Reply(_header_only(ident, flags, "SERVFAIL"), rcode="SERVFAIL")
        if self.metrics is not None:
            if reply.packet is None:
                self.metrics.drop(reply.drop_reason)
            else:
                self.metrics.query(reply.qtype, reply.rcode, transport)
                if reply.truncated:
                    self.metrics.truncated.labels(transport).inc()
        return reply.packet

    def _build(self, query: bytes, tcp: bool) -> tuple[bytes | None, str, str]:
        """A canonical query answered the full way, for a template (see `TemplateCache`)."""
        try:
            reply = self._handle(query, "tcp" if tcp else "udp")
        except Exception:
            logger.exception("DNS server failed to precompute a reply")
            return None, "", "SERVFAIL"
        return reply.packet, reply.qtype or "", reply.rcode

    def _handle(self, data: bytes, transport: Literal["udp", "tcp"]) -> _Reply:
        if len(data) < _HEADER.size:
            logger.debug("DNS: dropped a %d-octet message (no header)", len(data))
            return _Reply(None, drop_reason="short")
        ident, flags, qdcount, ancount, nscount, arcount = _HEADER.unpack_from(data)
        if flags & _QR:
            logger.debug("DNS: dropped a response (QR=1), id %d", ident)
            return _Reply(None, drop_reason="response")

        def error(rcode: str, why: str) -> _Reply:
            logger.debug("DNS: %s for id %d: %s", rcode, ident, why)
            return _Reply(_header_only(ident, flags, rcode), rcode=rcode)

        opcode = (flags >> 11) & 0xF
        if opcode != 0:
            return error("NOTIMP", f"opcode {opcode}")
        if qdcount != 1:
            return error("FORMERR", f"{qdcount} questions")
        if ancount or nscount or arcount > 2:
            return error("FORMERR", f"sections {ancount}/{nscount}/{arcount}")
        try:
            query = DNSRecord.parse(data)
        except Exception as e:  # dnslib raises several kinds; all mean a bad message
            return error("FORMERR", f"unparsable: {e}")
        question: DNSQuestion = query.questions[0]
        labels: tuple[bytes, ...] = tuple(question.qname.label)
        if wire_length(labels) > 255 or any(len(label) > 63 for label in labels):
            return error("FORMERR", "name longer than 255 octets or a label over 63")
        opts = [rr for rr in query.ar if rr.rtype == OPT]
        if len(opts) > 1:
            return error("FORMERR", "more than one OPT record")
        opt = opts[0] if opts else None

        qtype = qtype_name(question.qtype)
        limit = _MAX_TCP
        if transport == "udp":
            advertised = opt.rclass if opt is not None else _MIN_UDP
            limit = max(_MIN_UDP, min(advertised, self.max_udp_payload))

        response = DNSRecord(
            DNSHeader(
                id=ident, bitmap=0, qr=1, rd=1 if flags & _RD else 0, cd=1 if flags & _CD else 0
            ),
            questions=[question],
        )
        if opt is not None:
            response.add_ar(EDNS0(udp_len=self.max_udp_payload, flags="do" if opt.edns_do else ""))
        if opt is not None and opt.edns_ver != 0:
            # BADVERS (16): the upper 8 bits go in the OPT record, the lower 4 in the header.
            response.ar[0].ttl |= 1 << 24
            logger.debug("DNS: BADVERS for id %d (EDNS version %d)", ident, opt.edns_ver)
            return _Reply(response.pack(), qtype, "BADVERS")

        if question.qclass not in (CLASS_IN, CLASS_ANY):
            result = QueryResult("REFUSED")
        else:
            result = answer_query(self.resolver, normalize_name(labels), question.qtype)
        response.header.rcode = rcode_number(result.rcode)
        response.header.aa = 1 if result.authoritative else 0
        try:
            owner = _Owners(question.qname, normalize_name(labels))
            for name, rtype, ttl, value in result.answers:
                response.add_answer(
                    RR(owner(name), QTYPE.reverse[rtype], ttl=ttl, rdata=_rdata(rtype, value))
                )
            for name, rtype, ttl, value in result.authority:
                response.add_auth(
                    RR(owner(name), QTYPE.reverse[rtype], ttl=ttl, rdata=_rdata(rtype, value))
                )
            packet = response.pack()
        except Exception:
            logger.exception("DNS: cannot encode the answer to %s %s", labels, qtype)
            return error("SERVFAIL", "unencodable answer")
        if len(packet) > limit:
            response.rr, response.auth = [], []
            response.header.tc = 1
            packet = response.pack()
            logger.debug(
                "DNS: truncated the %s answer to id %d (limit %d)", transport, ident, limit
            )
            if len(packet) > limit:  # pragma: no cover - a question and OPT fit in 512
                return error("SERVFAIL", "reply does not fit")
            return _Reply(packet, qtype, result.rcode, truncated=True)
        return _Reply(packet, qtype, result.rcode)

    # ------------------------------------------------------------------ TCP

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        table, evicted = self._guard.table, self._guard.table.evicted
        if not table.opened():  # at the cap with every connection being answered
            logger.debug("DNS: refused a TCP connection (%d open)", table.count)
            if self.metrics is not None:
                self.metrics.drop("tcp_limit")
            writer.transport.abort()
            writer.close()
            return
        if self.metrics is not None:
            if table.evicted > evicted:
                self.metrics.drop("tcp_evicted")
            self.metrics.tcp_connections.inc()
        self._connections.add(task)
        waiting, loop = _TcpConnection(writer.transport), asyncio.get_running_loop()
        try:
            self._guard.wait(waiting, loop)  # the first query's deadline
            while True:
                prefix = await reader.readexactly(2)
                (length,) = struct.unpack("!H", prefix)
                message = await reader.readexactly(length)
                table.done(waiting)
                reply = self.handle(message, "tcp")
                if reply is None and len(message) < _HEADER.size:
                    break  # no header: the framing cannot be trusted either
                if reply is not None:
                    writer.write(struct.pack("!H", len(reply)) + reply)
                    async with asyncio.timeout(self.tcp_idle_timeout):
                        await writer.drain()
                self._guard.wait(waiting, loop, idle=True)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
            logger.debug("DNS: TCP connection ends: %r", e)
        except Exception:
            logger.exception("DNS: TCP connection failed")
        finally:
            table.closed(waiting)
            self._connections.discard(task)
            if self.metrics is not None:
                self.metrics.tcp_connections.dec()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class _TcpConnection:
    """A DNS-over-TCP connection as the guard's table sees it while it waits for a
    query: closed when its deadline passes or a new connection needs its place (its
    reader then sees EOF and the connection's task ends)."""

    __slots__ = ("transport",)

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def give_up(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


class _Owners:
    """Owner names for answer records: the query's own spelling where the name is the query's."""

    def __init__(self, qname: DNSLabel, normalized: str) -> None:
        self.qname = qname
        self.normalized = normalized

    def __call__(self, name: str) -> DNSLabel:
        key = name.lower().rstrip(".") or "."
        if key == self.normalized:
            return self.qname
        return DNSLabel(name)


def _warm_key(name: str, qtype: str) -> tuple[bytes, int]:
    """The template key of a plain query for `name` (RD set, no EDNS) of type `qtype`."""
    labels = [label.encode("ascii").lower() for label in name.rstrip(".").split(".") if label]
    wire = b"".join(bytes((len(label),)) + label for label in labels) + b"\x00"
    question = wire + struct.pack("!HH", qtype_number(qtype), CLASS_IN)
    return question + bytes((0x04,)), 12 + len(wire)


def _grow_receive_buffer(sock: socket.socket, wanted: int) -> int:
    """Ask for a `wanted`-octet SO_RCVBUF; what the kernel granted (it doubles the ask, and
    caps it at net.core.rmem_max unless SO_RCVBUFFORCE is allowed, as for root)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, wanted)
    granted = int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    force = getattr(socket, "SO_RCVBUFFORCE", None)
    if granted < wanted and force is not None:
        with contextlib.suppress(OSError):  # EPERM without CAP_NET_ADMIN: keep what we got
            sock.setsockopt(socket.SOL_SOCKET, force, wanted)
            granted = int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    return granted


class _UdpEndpoint:
    """The UDP socket, read until empty on each wakeup; replies sent without waiting.

    A reply the kernel cannot take at once (EAGAIN) waits in a bounded backlog that is
    flushed when the socket becomes writable; past the bound it is dropped and counted.
    """

    _BACKLOG = 4096

    def __init__(self, server: DnsServer, sock: socket.socket, loop: asyncio.AbstractEventLoop):
        self.server = server
        self.sock = sock
        self.loop = loop
        self.port = int(sock.getsockname()[1])
        self.inode = os.fstat(sock.fileno()).st_ino
        self._backlog: collections.deque[tuple[bytes, Any]] = collections.deque()
        self._fd = sock.fileno()
        loop.add_reader(self._fd, self._readable)

    def close(self) -> None:
        if self._fd < 0:
            return
        self.loop.remove_reader(self._fd)
        if self._backlog:
            self.loop.remove_writer(self._fd)
            self._backlog.clear()
        self._fd = -1
        self.sock.close()

    def _readable(self) -> None:
        server, recvfrom = self.server, self.sock.recvfrom
        cache = server.cache
        templates = None if cache is None else cache.current()
        for _ in range(server.udp_batch):
            try:
                data, addr = recvfrom(_MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.debug("DNS: UDP receive error: %r", exc)
                return
            reply = server._answer(data, "udp", templates)
            if reply is not None:
                self._send(reply, addr)

    def _send(self, reply: bytes, addr: Any) -> None:
        if not self._backlog:
            try:
                self.sock.sendto(reply, addr)
                return
            except (BlockingIOError, InterruptedError):
                self.loop.add_writer(self._fd, self._writable)
            except OSError as exc:
                logger.debug("DNS: UDP send to %s failed: %r", addr, exc)
                self._dropped("send_failed")
                return
        if len(self._backlog) >= self._BACKLOG:
            self._dropped("send_backlog_full")
            return
        self._backlog.append((reply, addr))

    def _writable(self) -> None:
        while self._backlog:
            reply, addr = self._backlog[0]
            try:
                self.sock.sendto(reply, addr)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.debug("DNS: UDP send to %s failed: %r", addr, exc)
                self._dropped("send_failed")
            self._backlog.popleft()
        self.loop.remove_writer(self._fd)

    def _dropped(self, reason: str) -> None:
        if self.server.metrics is not None:
            self.server.metrics.drop(reason)


_MAX_DATAGRAM: Final = 65535
