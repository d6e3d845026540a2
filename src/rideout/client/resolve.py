"""Name resolution through a chosen resolver: the system's, a nameserver, or DNS-over-HTTPS.

A failover only reaches clients that re-resolve: rideout's DNS answers with the healthy
region's addresses, and a client that asks its own nameserver (or the operating
system's cache) may keep the dead region's for minutes. These resolvers ask a chosen
server directly and report the answer's TTL, so a :class:`CachingResolver` keeps an
answer exactly as long as the zone says and no longer::

    resolver = CachingResolver(NameserverResolver("127.0.0.1", 5353))
    resolved = await resolver.resolve("auction.rideout.test")
    resolved.addresses, resolved.ttl  # ('127.0.1.1', '127.0.1.2'), 5.0

Every failure is a :class:`ResolutionError` with a machine-readable
:class:`ResolutionFailure` reason; no httpx, socket or wire-format exception escapes.
Only IPv4 (``A`` records) is resolved: every rideout address is in 127.0.0.0/8 locally
and a single family keeps answers comparable between resolvers.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, cast

import httpx

from rideout import _http
from rideout._validate import count, seconds
from rideout.client import _dnswire
from rideout.client.errors import ClientError
from rideout.errors import InvalidArgument

__all__ = [
    "CachingResolver",
    "DohResolver",
    "NameserverResolver",
    "ResolutionError",
    "ResolutionFailure",
    "Resolved",
    "Resolver",
    "SystemResolver",
]


class ResolutionFailure(StrEnum):
    """Why a name did not resolve (the ``reason`` of a :class:`ResolutionError`)."""

    NXDOMAIN = "nxdomain"
    """The name does not exist."""
    NO_ANSWER = "no_answer"
    """The name exists but has no A record."""
    TIMEOUT = "timeout"
    """No answer within the resolver's time limit."""
    SERVFAIL = "servfail"
    """The server failed (SERVFAIL, or a temporary failure of the system resolver)."""
    REFUSED = "refused"
    """The server refused the query."""
    UNREACHABLE = "unreachable"
    """The server could not be reached at all (connection refused, network down)."""
    MALFORMED = "malformed"
    """The answer could not be understood (bad DoH JSON, a non-address in an A record)."""
    ERROR = "error"
    """Anything else, e.g. a name that is not a valid domain name."""


class ResolutionError(ClientError):
    """``name`` did not resolve; ``reason`` says why, ``detail`` adds what is known."""

    name: str
    reason: ResolutionFailure
    detail: str

    def __init__(self, name: str, reason: ResolutionFailure | str, detail: str = "") -> None:
        self.name = name
        self.reason = ResolutionFailure(reason)
        self.detail = detail
        super().__init__(name, self.reason, detail)

    def __str__(self) -> str:
        text = f"cannot resolve {self.name!r}: {self.reason.value}"
        return f"{text} ({self.detail})" if self.detail else text

    def __reduce__(self) -> tuple[type[ResolutionError], tuple[str, str, str]]:
        return (type(self), (self.name, self.reason.value, self.detail))


@dataclass(frozen=True, slots=True)
class Resolved:
    """An answer: IPv4 addresses in the server's order, how long it may be kept, and who said so."""

    addresses: tuple[str, ...]
    ttl: float
    source: str


class Resolver(Protocol):
    """Anything that resolves a name to IPv4 addresses.

    A resolver that caches may also have ``invalidate(name)`` (as
    :class:`CachingResolver`): the WebSocket client calls it when every address of an
    answer refused the connection, so that its next attempt asks again.
    """

    async def resolve(self, name: str) -> Resolved:
        """The name's addresses; :class:`ResolutionError` when there are none."""
        ...


def _normal(name: str) -> str:
    """The cache key of a name: lower case, without the root's trailing dot."""
    return name.rstrip(".").lower()


def _unique(addresses: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(addresses))


_RCODE_REASONS = {
    2: ResolutionFailure.SERVFAIL,
    3: ResolutionFailure.NXDOMAIN,
    5: ResolutionFailure.REFUSED,
}


def _check_rcode(name: str, rcode: int, source: str) -> None:
    """Raise the :class:`ResolutionError` a DNS rcode other than NOERROR amounts to."""
    if rcode != 0:
        reason = _RCODE_REASONS.get(rcode, ResolutionFailure.ERROR)
        raise ResolutionError(name, reason, f"{source}: rcode {rcode}")


# ----------------------------------------------------------------------------- system


class SystemResolver:
    """The operating system's resolver (``getaddrinfo``), which reports no TTL.

    Answers carry ``default_ttl`` instead. ``getaddrinfo`` runs in a worker thread that
    cannot be interrupted: after ``timeout`` the caller gets a TIMEOUT error while the
    lookup finishes in the background.
    """

    def __init__(self, *, default_ttl: float = 30.0, timeout: float = 5.0) -> None:
        self.default_ttl = seconds("default_ttl", default_ttl, zero_ok=True)
        self.timeout = seconds("timeout", timeout)

    def __repr__(self) -> str:
        return f"SystemResolver(default_ttl={self.default_ttl!r}, timeout={self.timeout!r})"

    async def resolve(self, name: str) -> Resolved:
        """Resolve through ``getaddrinfo`` (IPv4 only)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                infos = await loop.getaddrinfo(
                    name, None, family=socket.AF_INET, type=socket.SOCK_STREAM
                )
        except TimeoutError:
            raise ResolutionError(
                name, ResolutionFailure.TIMEOUT, f"getaddrinfo took over {self.timeout:g} s"
            ) from None
        except socket.gaierror as exc:
            raise ResolutionError(name, _gai_reason(exc), str(exc)) from None
        except (UnicodeError, ValueError, OSError) as exc:
            raise ResolutionError(name, ResolutionFailure.ERROR, str(exc)) from None
        addresses = _unique([str(info[4][0]) for info in infos])
        if not addresses:
            raise ResolutionError(name, ResolutionFailure.NO_ANSWER, "getaddrinfo returned nothing")
        return Resolved(addresses, self.default_ttl, "system")


def _gai_reason(exc: socket.gaierror) -> ResolutionFailure:
    code = exc.errno
    if code == socket.EAI_NONAME:
        return ResolutionFailure.NXDOMAIN
    if code is not None and code == getattr(socket, "EAI_NODATA", object()):
        return ResolutionFailure.NO_ANSWER
    if code in (socket.EAI_AGAIN, socket.EAI_FAIL):
        return ResolutionFailure.SERVFAIL
    return ResolutionFailure.ERROR


# ------------------------------------------------------------------------- nameserver


class NameserverResolver:
    """Ask one nameserver directly over UDP, and over TCP when the answer is truncated.

    The query and its answer are written and read by :mod:`rideout.client._dnswire`
    (no DNS library). Each lookup has a UDP socket of its own, connected to the server
    (the OS picks a random source port; only the server's datagrams arrive), and a
    random id; a datagram that does not answer the query is ignored. Without an answer
    the query is sent again after 0.5 s, then 1 s, 2 s, ... ``timeout`` bounds the whole
    lookup, retransmissions and the TCP retry included. The answer's TTL is the smallest
    TTL of the records that produced it (a CNAME chain included). Nothing is cached:
    wrap in :class:`CachingResolver` to cache.
    """

    def __init__(self, host: str, port: int = 53, *, timeout: float = 2.0) -> None:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise InvalidArgument(f"nameserver host must be an IP address, not {host!r}") from None
        self.host = host
        self.port = count("nameserver port", port, low=1, high=65535)
        self.timeout = seconds("timeout", timeout)
        self._family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        self._source = f"dns://{host}:{port}" if ":" not in host else f"dns://[{host}]:{port}"

    def __repr__(self) -> str:
        return f"NameserverResolver({self.host!r}, {self.port!r}, timeout={self.timeout!r})"

    async def resolve(self, name: str) -> Resolved:
        """The name's A records from the nameserver, with the answer's TTL."""
        query_id = secrets.randbelow(0x10000)
        try:
            query = _dnswire.encode_query(name, query_id)
        except ValueError as exc:
            raise ResolutionError(name, ResolutionFailure.ERROR, f"{self._source}: {exc}") from None
        try:
            async with asyncio.timeout(self.timeout):
                answer = await self._udp(query, query_id, name)
                if answer.truncated:
                    answer = await self._tcp(query, query_id, name)
        except TimeoutError:
            raise ResolutionError(
                name, ResolutionFailure.TIMEOUT, f"{self._source} after {self.timeout:g} s"
            ) from None
        except (_dnswire.MalformedResponse, _dnswire.Mismatch) as exc:
            raise ResolutionError(
                name, ResolutionFailure.MALFORMED, f"{self._source}: {exc}"
            ) from None
        except EOFError:
            raise ResolutionError(
                name, ResolutionFailure.ERROR, f"{self._source}: TCP closed before the answer"
            ) from None
        except OSError as exc:
            raise ResolutionError(
                name, ResolutionFailure.UNREACHABLE, f"{self._source}: {exc}"
            ) from None
        _check_rcode(name, answer.rcode, self._source)
        if not answer.addresses:
            raise ResolutionError(name, ResolutionFailure.NO_ANSWER, self._source)
        return Resolved(answer.addresses, float(answer.ttl), self._source)

    async def _udp(self, query: bytes, query_id: int, name: str) -> _dnswire.Answer:
        sock = socket.socket(self._family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.connect((self.host, self.port))
            transport, exchange = await asyncio.get_running_loop().create_datagram_endpoint(
                lambda: _UdpExchange(query, query_id, name), sock=sock
            )
        except BaseException:
            sock.close()
            raise
        try:
            return await exchange.answer
        finally:
            exchange.close()
            transport.close()

    async def _tcp(self, query: bytes, query_id: int, name: str) -> _dnswire.Answer:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(len(query).to_bytes(2, "big") + query)
            size = int.from_bytes(await reader.readexactly(2), "big")
            data = await reader.readexactly(size)
        finally:
            writer.close()
        answer = _dnswire.parse_response(data, query_id, name)
        if answer.truncated:
            raise _dnswire.MalformedResponse("the TCP answer is truncated too")
        return answer


_FIRST_WAIT = 0.5  # seconds before the first retransmission; each next one waits twice as long
_UDP_SENDS = 6  # 0.5 + 1 + 2 + 4 + 8 s: the last one waits for whatever time is left


class _UdpExchange(asyncio.DatagramProtocol):
    """One lookup over a connected UDP socket: sends, resends, keeps the first answer."""

    def __init__(self, query: bytes, query_id: int, name: str) -> None:
        self._loop = asyncio.get_running_loop()
        self.answer: asyncio.Future[_dnswire.Answer] = self._loop.create_future()
        self._query, self._id, self._name = query, query_id, name
        self._transport: asyncio.DatagramTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._sends = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)
        self._send(_FIRST_WAIT)

    def _send(self, wait: float) -> None:
        assert self._transport is not None
        self._sends += 1
        self._transport.sendto(self._query)
        if self._sends < _UDP_SENDS:
            self._timer = self._loop.call_later(wait, self._send, 2 * wait)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.answer.done():
            return
        try:
            self.answer.set_result(_dnswire.parse_response(data, self._id, self._name))
        except _dnswire.Mismatch:
            pass  # a stray or spoofed datagram: keep waiting
        except _dnswire.MalformedResponse as exc:
            self.answer.set_exception(exc)

    def error_received(self, exc: Exception) -> None:
        # On a connected socket: ICMP port unreachable (ConnectionRefusedError) and kin.
        if not self.answer.done():
            self.answer.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(exc or ConnectionError("the UDP socket closed"))
        self.close()

    def close(self) -> None:
        """Stop resending; an answer not yet come is no longer awaited."""
        if self._timer is not None:
            self._timer.cancel()
        if not self.answer.done():
            self.answer.cancel()


# ---------------------------------------------------------------------- DNS over HTTPS

_DOH_MAX_BYTES = 64 * 1024
_TYPE_A = 1


class DohResolver:
    """DNS-over-HTTPS in the JSON format of Google and Cloudflare (``application/dns-json``).

    Sends ``GET {url}?name=NAME&type=A`` and reads ``Status`` (the DNS rcode) and
    ``Answer: [{name, type, TTL, data}]``; the answer's TTL is the smallest TTL in it.
    ``timeout`` bounds the whole exchange; answers over 64 KiB are refused as
    malformed. Owns an ``httpx.AsyncClient`` unless one is given: close it with
    :meth:`aclose` (or ``async with``).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 2.0,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise InvalidArgument(f"DoH url must be an absolute http(s) URL, not {url!r}")
        self.url = url
        self.timeout = seconds("timeout", timeout)
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else _http.async_client(transport=transport, timeout=self.timeout)
        )

    def __repr__(self) -> str:
        return f"DohResolver({self.url!r}, timeout={self.timeout!r})"

    async def __aenter__(self) -> DohResolver:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this resolver made it."""
        if self._owns_client:
            await self._client.aclose()

    async def resolve(self, name: str) -> Resolved:
        """Ask the DoH endpoint for the name's A records."""
        source = f"doh:{self.url}"
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._fetch(name)
        except TimeoutError:
            raise ResolutionError(
                name, ResolutionFailure.TIMEOUT, f"{source} after {self.timeout:g} s"
            ) from None
        except httpx.TimeoutException as exc:
            raise ResolutionError(name, ResolutionFailure.TIMEOUT, f"{source}: {exc}") from None
        except (httpx.ConnectError, httpx.NetworkError) as exc:
            raise ResolutionError(
                name, ResolutionFailure.UNREACHABLE, f"{source}: {exc or type(exc).__name__}"
            ) from None
        except httpx.HTTPError as exc:
            raise ResolutionError(
                name, ResolutionFailure.ERROR, f"{source}: {exc or type(exc).__name__}"
            ) from None
        addresses, ttl = _parse_doh(name, body, source)
        return Resolved(addresses, ttl, source)

    async def _fetch(self, name: str) -> bytes:
        async with self._client.stream(
            "GET",
            self.url,
            params={"name": name, "type": "A"},
            headers={"accept": "application/dns-json"},
        ) as response:
            if response.status_code != 200:
                raise ResolutionError(
                    name,
                    ResolutionFailure.SERVFAIL,
                    f"doh:{self.url} answered HTTP {response.status_code}",
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > _DOH_MAX_BYTES:
                    raise ResolutionError(
                        name,
                        ResolutionFailure.MALFORMED,
                        f"doh:{self.url} answered more than {_DOH_MAX_BYTES} bytes",
                    )
                chunks.append(chunk)
            return b"".join(chunks)


def _parse_doh(name: str, body: bytes, source: str) -> tuple[tuple[str, ...], float]:
    """Addresses and TTL from a DoH JSON answer, or the ResolutionError it amounts to."""

    def malformed(why: str) -> ResolutionError:
        return ResolutionError(name, ResolutionFailure.MALFORMED, f"{source}: {why}")

    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise malformed("the answer is not JSON") from None
    if not isinstance(data, dict):
        raise malformed("the answer is not a JSON object")
    status = data.get("Status")
    if isinstance(status, bool) or not isinstance(status, int):
        raise malformed(f"Status is {status!r}, not an rcode")
    _check_rcode(name, status, source)
    records = data.get("Answer", [])
    if not isinstance(records, list):
        raise malformed("Answer is not a list")
    addresses: list[str] = []
    ttls: list[float] = []
    for record in records:
        if not isinstance(record, dict):
            raise malformed("an Answer entry is not an object")
        kind, ttl, value = record.get("type"), record.get("TTL"), record.get("data")
        if isinstance(kind, bool) or not isinstance(kind, int):
            raise malformed(f"an Answer entry has type {kind!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
            raise malformed(f"an Answer entry has TTL {ttl!r}")
        ttls.append(float(ttl))
        if kind != _TYPE_A:
            continue  # a CNAME in the chain: its TTL counts, its data does not
        try:
            addresses.append(str(ipaddress.IPv4Address(value)))
        except (ValueError, TypeError):
            raise malformed(f"an A record holds {value!r}, not an IPv4 address") from None
    if not addresses:
        raise ResolutionError(name, ResolutionFailure.NO_ANSWER, source)
    return _unique(addresses), min(ttls)


# ---------------------------------------------------------------------------- caching


class CachingResolver:
    """Keep each answer for its TTL (capped at ``max_ttl``), measured on ``clock``.

    A cached answer is returned with the TTL it has left. Failures are not cached, so
    a name that failed is asked again at once. ``max_entries`` bounds the cache: the
    oldest answer is dropped first. ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        inner: Resolver,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_ttl: float = 3600.0,
        max_entries: int = 1024,
    ) -> None:
        self.inner = inner
        self.max_ttl = seconds("max_ttl", max_ttl, zero_ok=True)
        self.max_entries = count("max_entries", max_entries, low=1)
        self._clock = clock
        self._entries: dict[str, tuple[Resolved, float]] = {}

    def __repr__(self) -> str:
        return f"CachingResolver({self.inner!r}, entries={len(self._entries)})"

    async def resolve(self, name: str) -> Resolved:
        """The cached answer while its TTL lasts, else a fresh one from ``inner``."""
        key = _normal(name)
        now = self._clock()
        cached = self._entries.get(key)
        if cached is not None:
            answer, expires_at = cached
            if now < expires_at:
                return Resolved(answer.addresses, expires_at - now, answer.source)
            del self._entries[key]
        answer = await self.inner.resolve(name)
        ttl = min(answer.ttl, self.max_ttl)
        if ttl > 0:
            self._entries.pop(key, None)
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = (answer, self._clock() + ttl)
        return answer

    def invalidate(self, name: str | None = None) -> None:
        """Forget ``name``'s answer (every answer when ``name`` is None)."""
        if name is None:
            self._entries.clear()
        else:
            self._entries.pop(_normal(name), None)
