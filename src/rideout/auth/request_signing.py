"""Signed requests: an HMAC-SHA256 over the exact body, a timestamp and a nonce.

A region's canary signs what it posts with its region's secret; the control plane
verifies it (:class:`RequestVerifier`) before reading a byte of the body as data. The
signature covers a canonical string (:func:`canonical_request`):

```
rideout-hmac-sha256-v1 \\n METHOD \\n PATH \\n REGION \\n TIMESTAMP \\n NONCE \\n hex(sha256(body))
```

so neither the body nor any header it depends on can be changed, a request signed for
one path or region cannot be replayed on another, a request older (or newer) than the
allowed clock skew is refused, and a request seen once within that window is refused the
second time (its nonce is remembered until its timestamp leaves the window).

Pure: no I/O, the clock is injected. The secrets' files are in
:mod:`rideout.auth.canary_keys`.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal

from rideout import _validate
from rideout.auth.errors import CredentialError
from rideout.errors import InvalidArgument

__all__ = [
    "NONCE_HEADER",
    "REGION_HEADER",
    "SCHEME",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "RequestSigner",
    "RequestVerifier",
    "SignatureError",
    "SignatureReason",
    "canonical_request",
    "request_signature",
]

SCHEME: Final = "rideout-hmac-sha256-v1"
REGION_HEADER: Final = "X-Rideout-Region"
TIMESTAMP_HEADER: Final = "X-Rideout-Timestamp"
"""Unix time in seconds, decimal, at most 6 fractional digits."""
NONCE_HEADER: Final = "X-Rideout-Nonce"
SIGNATURE_HEADER: Final = "X-Rideout-Signature"
"""Lower-case hex of the HMAC-SHA256 of the canonical request."""

SignatureReason = Literal[
    "missing", "malformed", "unknown_region", "stale", "bad_signature", "replayed", "busy"
]

_HEADERS: Final = (REGION_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
_REGION: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_TIMESTAMP: Final = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
_NONCE: Final = re.compile(r"[A-Za-z0-9_-]{16,64}")
_SIGNATURE: Final = re.compile(r"[0-9a-f]{64}")
_PATH: Final = re.compile(r"/[!-~]*")  # printable ASCII, no spaces


class SignatureError(CredentialError):
    """A signed request was refused. ``reason`` is a stable code, ``status`` the HTTP
    status to answer (401, or 503 for ``busy``); the message never contains a secret or
    the expected signature."""

    def __init__(self, reason: SignatureReason, message: str) -> None:
        self.reason: SignatureReason = reason
        self.status = 503 if reason == "busy" else 401
        self.message = message
        super().__init__(f"{reason}: {message}")


def canonical_request(
    method: str, path: str, region: str, timestamp: str, nonce: str, body: bytes
) -> bytes:
    """The bytes a signature covers (see the module's docstring)."""
    digest = hashlib.sha256(body).hexdigest()
    return "\n".join((SCHEME, method.upper(), path, region, timestamp, nonce, digest)).encode()


def request_signature(secret: bytes, canonical: bytes) -> str:
    """Lower-case hex HMAC-SHA256 of `canonical` under `secret`."""
    return hmac.new(secret, canonical, hashlib.sha256).hexdigest()


class RequestSigner:
    """Signs requests for one region: :meth:`headers` gives the four headers to send."""

    def __init__(
        self,
        region: str,
        secret: bytes,
        *,
        clock: Callable[[], float] = time.time,
        nonce: Callable[[], str] = lambda: secrets.token_hex(16),
    ) -> None:
        if not _REGION.fullmatch(region):
            raise InvalidArgument(f"region must be a region name, not {region!r}")
        if len(secret) < 16:
            raise InvalidArgument("secret must be at least 16 bytes")
        self.region = region
        self._secret = secret
        self._clock = clock
        self._nonce = nonce

    def headers(self, method: str, path: str, body: bytes) -> dict[str, str]:
        """The signature headers for one request of `method` to `path` with `body`."""
        timestamp = f"{self._clock():.6f}"
        nonce = self._nonce()
        canonical = canonical_request(method, path, self.region, timestamp, nonce, body)
        return {
            REGION_HEADER: self.region,
            TIMESTAMP_HEADER: timestamp,
            NONCE_HEADER: nonce,
            SIGNATURE_HEADER: request_signature(self._secret, canonical),
        }


class RequestVerifier:
    """Verifies signed requests against each region's secrets (the current one and,
    while a rotation is under way, the previous one)."""

    def __init__(
        self,
        keys: Mapping[str, Sequence[bytes]],
        *,
        max_skew: float = 30.0,
        clock: Callable[[], float] = time.time,
        max_remembered: int = 100_000,
    ) -> None:
        self._keys = {region: tuple(secrets_) for region, secrets_ in keys.items()}
        if not all(self._keys.values()):
            raise InvalidArgument("keys must give every region at least one secret")
        self.max_skew = _validate.seconds("max_skew", max_skew)
        self._max_remembered = _validate.count("max_remembered", max_remembered, low=1)
        self._clock = clock
        self._seen: dict[tuple[str, str], float] = {}  # (region, nonce) -> forget after
        self._expiries: list[tuple[float, tuple[str, str]]] = []  # a heap over _seen

    @property
    def regions(self) -> frozenset[str]:
        return frozenset(self._keys)

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> str:
        """The region a genuine, fresh, first-seen request was signed for; else raise
        :class:`SignatureError`. `headers` is looked up case-insensitively."""
        lower = {name.lower(): value for name, value in headers.items()}
        absent = [h for h in _HEADERS if h.lower() not in lower]
        if absent:
            raise SignatureError("missing", f"a signed request needs {', '.join(absent)}")
        region, timestamp, nonce, signature = (lower[h.lower()] for h in _HEADERS)
        if not (
            _REGION.fullmatch(region)
            and _TIMESTAMP.fullmatch(timestamp)
            and _NONCE.fullmatch(nonce)
            and _SIGNATURE.fullmatch(signature)
            and _PATH.fullmatch(path)
        ):
            raise SignatureError("malformed", "a signature header is not in its format")
        keys = self._keys.get(region)
        if keys is None:
            raise SignatureError("unknown_region", f"no credential for region {region!r}")
        now = self._clock()
        sent = float(timestamp)
        if abs(now - sent) > self.max_skew:
            raise SignatureError(
                "stale", f"the timestamp is more than {self.max_skew:g} s from this server's clock"
            )
        canonical = canonical_request(method, path, region, timestamp, nonce, body)
        # Every key is tried (no early exit), so timing does not tell which one matched.
        matched = False
        for secret in keys:
            matched |= hmac.compare_digest(request_signature(secret, canonical), signature)
        if not matched:
            raise SignatureError("bad_signature", f"not signed with {region}'s credential")
        self._remember(region, nonce, sent + self.max_skew, now)
        return region

    def _remember(self, region: str, nonce: str, until: float, now: float) -> None:
        while self._expiries and self._expiries[0][0] < now:
            _, key = heapq.heappop(self._expiries)
            self._seen.pop(key, None)
        key = (region, nonce)
        if key in self._seen:
            raise SignatureError("replayed", "this request was already received")
        if len(self._seen) >= self._max_remembered:
            raise SignatureError("busy", "too many signed requests in the skew window")
        self._seen[key] = until
        heapq.heappush(self._expiries, (until, key))
