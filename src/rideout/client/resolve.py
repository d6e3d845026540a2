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
:class:`ResolutionFailure` reason; no dnspython, httpx or socket exception escapes.
Only IPv4 (``A`` records) is resolved: every rideout address is in 127.0.0.0/8 locally
and a single family keeps answers comparable between resolvers.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import dns.asyncresolver
import dns.exception
import dns.rcode
import dns.resolver
import httpx

from rideout._validate import count, seconds
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
    """Ask one nameserver directly (dnspython): UDP, TCP when the answer is truncated.

    ``timeout`` bounds the whole lookup, retransmissions included. The answer's TTL is
    the smallest TTL of the records that produced it (a CNAME chain included).
    dnspython's own cache is off: wrap in :class:`CachingResolver` to cache.
    """

    def __init__(self, host: str, port: int = 53, *, timeout: float = 2.0) -> None:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise InvalidArgument(f"nameserver host must be an IP address, not {host!r}") from None
        self.host = host
        self.port = count("nameserver port", port, low=1, high=65535)
        self.timeout = seconds("timeout", timeout)
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [host]
        resolver.port = port
        resolver.timeout = self.timeout
        resolver.lifetime = self.timeout
        resolver.cache = None
        self._resolver = resolver
        self._source = f"dns://{host}:{port}" if ":" not in host else f"dns://[{host}]:{port}"

    def __repr__(self) -> str:
        return f"NameserverResolver({self.host!r}, {self.port!r}, timeout={self.timeout!r})"

    async def resolve(self, name: str) -> Resolved:
        """The name's A records from the nameserver, with the answer's TTL."""
        try:
            answer = await self._resolver.resolve(name, "A", search=False)
        except dns.resolver.NXDOMAIN:
            raise ResolutionError(name, ResolutionFailure.NXDOMAIN, self._source) from None
        except dns.resolver.NoAnswer:
            raise ResolutionError(name, ResolutionFailure.NO_ANSWER, self._source) from None
        except dns.exception.Timeout:
            raise ResolutionError(
                name, ResolutionFailure.TIMEOUT, f"{self._source} after {self.timeout:g} s"
            ) from None
        except dns.resolver.NoNameservers as exc:
            reason, detail = _no_nameservers(exc)
            raise ResolutionError(name, reason, f"{self._source}: {detail}") from None
        except dns.exception.DNSException as exc:
            raise ResolutionError(name, ResolutionFailure.ERROR, f"{self._source}: {exc}") from None
        except OSError as exc:
            raise ResolutionError(
                name, ResolutionFailure.UNREACHABLE, f"{self._source}: {exc}"
            ) from None
        addresses = _unique([rdata.address for rdata in answer])
        if not addresses:  # pragma: no cover - dnspython raises NoAnswer first
            raise ResolutionError(name, ResolutionFailure.NO_ANSWER, self._source)
        ttl = min((rrset.ttl for rrset in answer.response.answer), default=0)
        return Resolved(addresses, float(ttl), self._source)


def _no_nameservers(exc: dns.resolver.NoNameservers) -> tuple[ResolutionFailure, str]:
    """The server's answer inside dnspython's "all nameservers failed"."""
    errors: list[Any] = list(exc.kwargs.get("errors") or [])
    for error in reversed(errors):
        # dnspython records (server, tcp, port, exception-or-rcode-text, response).
        response = error[4] if len(error) > 4 else None
        if response is not None:
            rcode = response.rcode()
            if rcode == dns.rcode.REFUSED:
                return ResolutionFailure.REFUSED, "REFUSED"
            if rcode == dns.rcode.SERVFAIL:
                return ResolutionFailure.SERVFAIL, "SERVFAIL"
            return ResolutionFailure.ERROR, dns.rcode.to_text(rcode)
        cause = error[3] if len(error) > 3 else None
        if isinstance(cause, OSError):
            return ResolutionFailure.UNREACHABLE, str(cause)
        if isinstance(cause, dns.exception.Timeout):
            return ResolutionFailure.TIMEOUT, str(cause)
        if cause is not None:
            return ResolutionFailure.ERROR, str(cause)
    return ResolutionFailure.SERVFAIL, "the nameserver failed"


# ---------------------------------------------------------------------- DNS over HTTPS

_DOH_MAX_BYTES = 64 * 1024
_TYPE_A = 1
_RCODE_REASONS = {
    2: ResolutionFailure.SERVFAIL,
    3: ResolutionFailure.NXDOMAIN,
    5: ResolutionFailure.REFUSED,
}


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
            else httpx.AsyncClient(transport=transport, timeout=self.timeout, trust_env=False)
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
    if status != 0:
        reason = _RCODE_REASONS.get(status, ResolutionFailure.ERROR)
        raise ResolutionError(name, reason, f"{source}: rcode {status}")
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
