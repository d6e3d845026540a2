"""DNS-over-HTTPS in the JSON form browsers can use: ``GET /resolve?name=…&type=…``.

The schema is Google Public DNS's, which Cloudflare follows too (``/resolve`` at
dns.google, ``/dns-query`` with ``Accept: application/dns-json`` at Cloudflare)::

    {"Status": 0, "TC": false, "RD": true, "RA": false, "AD": false, "CD": false,
     "Question": [{"name": "auction.rideout.test.", "type": 1}],
     "Answer": [{"name": "auction.rideout.test.", "type": 1, "TTL": 1, "data": "127.0.1.1"}]}

- The same resolver as the DNS server answers, through the same
  `rideout.dns.query.answer_query`, so both transports agree. Given `generation` (as for
  `DnsServer`), each distinct question is resolved once per generation (a DNS view) and
  its result reused until the generation changes, as the server's precomputed replies are. ``Status`` is the DNS rcode, sent with
  HTTP 200 whatever it is (NXDOMAIN, REFUSED, SERVFAIL), as Google and Cloudflare do.
  ``RA`` is false: this is the authoritative server, not a recursive resolver.
- ``Answer`` and ``Authority`` are left out when empty, as Google does. Names end with a
  dot; a record owned by the query name carries the query's spelling.
- TXT ``data`` is the text itself, unquoted, as Google Public DNS returns it (Cloudflare
  wraps it in quotes, ``"\\"text\\""``); SOA data is ``"mname. rname. serial refresh retry
  expire minimum"``, NS and CNAME data a name with its dot.
- ``Content-Type: application/dns-json``: Cloudflare's type, the one clients put in
  ``Accept`` (Google sends ``application/json``; browsers' ``response.json()`` takes either).
- ``Cache-Control: max-age=<smallest TTL>`` of the answer (of the authority section for
  a negative answer, whose SOA also bounds it by its minimum, RFC 2308), so a browser
  keeps an address exactly as long as a resolver would; ``no-store`` when there is
  nothing to cache (REFUSED, SERVFAIL).
- ``Access-Control-Allow-Origin: *``: the records are public; preflights are answered.
- Bad input is HTTP 400 with ``{"error": …}``: a missing or empty ``name``, one longer than
  253 octets (without its trailing dot), an empty label or one over 63 octets, non-ASCII
  (send punycode), whitespace or backslash escapes; a ``type`` that is neither a known
  mnemonic nor a number in 1..65535. As at Google, the first of repeated parameters counts
  and parameter names are case-insensitive.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rideout.dns.errors import DnsError
from rideout.dns.query import (
    QueryResult,
    Resolver,
    RRTuple,
    answer_query,
    normalize_name,
    qtype_name,
    qtype_number,
    rcode_number,
)
from rideout.dns.server import DnsMetrics

__all__ = [
    "DOH_MEDIA_TYPE",
    "DohRequestError",
    "doh_endpoint",
    "doh_json",
    "doh_route",
    "parse_name",
]

logger = logging.getLogger(__name__)

DOH_MEDIA_TYPE: Final = "application/dns-json"

_CORS: Final = {"Access-Control-Allow-Origin": "*"}
_PREFLIGHT: Final = {
    **_CORS,
    "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": "Accept, Content-Type",
    "Access-Control-Max-Age": "86400",
}
_NAME_TYPES: Final = frozenset({"NS", "CNAME"})
_TRUE: Final = frozenset({"1", "true"})


class DohRequestError(DnsError, ValueError):
    """A query the endpoint cannot take; its message says why (sent with HTTP 400)."""


def parse_name(text: str) -> tuple[bytes, ...]:
    """The labels of a query name as Google's JSON API accepts it; DohRequestError if not.

    ``"."`` is the root; one trailing dot is optional.
    """
    if not text:
        raise DohRequestError("name is required")
    if text == ".":
        return ()
    if not text.isascii():
        raise DohRequestError("name must be ASCII: send internationalized names as punycode")
    body = text[:-1] if text.endswith(".") else text
    if not 1 <= len(body) <= 253:
        raise DohRequestError("name must be 1 to 253 characters long, without its trailing dot")
    labels = body.split(".")
    for label in labels:
        if not label:
            raise DohRequestError(f"name {text!r} has an empty label")
        if len(label) > 63:
            raise DohRequestError(f"label {label[:20]!r}... is longer than 63 characters")
        if any(not 0x21 <= ord(c) <= 0x7E or c == "\\" for c in label):
            raise DohRequestError(f"name {text!r} has whitespace, a control character or an escape")
    return tuple(label.encode("ascii") for label in labels)


def _fqdn(name: str) -> str:
    return name if name.endswith(".") else name + "."


def _data(rtype: str, value: str) -> str:
    if rtype in _NAME_TYPES:
        return _fqdn(value)
    if rtype == "SOA":
        parts = value.split()
        if len(parts) >= 2:
            parts[0], parts[1] = _fqdn(parts[0]), _fqdn(parts[1])
        return " ".join(parts)
    return value


def _max_age(result: QueryResult) -> int | None:
    if result.answers:
        return min(ttl for _, _, ttl, _ in result.answers)
    ttls: list[int] = []
    for _, rtype, ttl, value in result.authority:
        ttls.append(ttl)
        if rtype == "SOA" and (parts := value.split()) and parts[-1].isdigit():
            ttls.append(int(parts[-1]))
    return min(ttls) if ttls else None


def doh_json(
    result: QueryResult, name: str, labels: tuple[bytes, ...], qtype: int, *, cd: bool = False
) -> dict[str, Any]:
    """The Google-format JSON body for `result`, the answer to `name` (as asked) and `qtype`."""
    asked = _fqdn(name)
    normalized = normalize_name(labels)

    def entries(records: tuple[RRTuple, ...]) -> list[dict[str, Any]]:
        out = []
        for owner, rtype, ttl, value in records:
            same = (owner.lower().rstrip(".") or ".") == normalized
            out.append(
                {
                    "name": asked if same else _fqdn(owner),
                    "type": qtype_number(rtype),
                    "TTL": ttl,
                    "data": _data(rtype, value),
                }
            )
        return out

    body: dict[str, Any] = {
        "Status": rcode_number(result.rcode),
        "TC": False,
        "RD": True,
        "RA": False,
        "AD": False,
        "CD": cd,
        "Question": [{"name": asked, "type": qtype}],
    }
    if result.answers:
        body["Answer"] = entries(result.answers)
    if result.authority:
        body["Authority"] = entries(result.authority)
    return body


def _param(request: Request, key: str) -> str | None:
    """The first value of a query parameter, its name taken without regard to case."""
    for k, v in request.query_params.multi_items():
        if k.lower() == key:
            return v
    return None


def _bad_request(message: str) -> Response:
    return JSONResponse({"error": message}, status_code=400, headers=_CORS)


class _Results:
    """Query results of one generation, bounded (past the bound: resolved every time)."""

    def __init__(self, resolver: Resolver, generation: Callable[[], object], limit: int) -> None:
        self.resolver = resolver
        self.generation = generation
        self.limit = limit
        self._token: object = None
        self._results: dict[tuple[str, int], QueryResult] = {}

    def __call__(self, qname: str, qtype: int) -> tuple[QueryResult, bool]:
        """The result for `qname`/`qtype`, and whether it was already known."""
        token = self.generation()
        if token != self._token:
            self._token, self._results = token, {}
        result = self._results.get((qname, qtype))
        if result is not None:
            return result, True
        result = answer_query(self.resolver, qname, qtype)
        if result.rcode != "SERVFAIL" and len(self._results) < self.limit:
            self._results[(qname, qtype)] = result
        return result, False


def doh_endpoint(
    resolver: Resolver,
    *,
    metrics: DnsMetrics | None = None,
    generation: Callable[[], object] | None = None,
    max_cached_answers: int = 10_000,
) -> Callable[[Request], Awaitable[Response]]:
    """The request handler behind `doh_route`, for mounting some other way."""
    results = None if generation is None else _Results(resolver, generation, max_cached_answers)

    async def resolve(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=_PREFLIGHT)
        name = _param(request, "name") or ""
        type_text = _param(request, "type") or "A"
        try:
            labels = parse_name(name)
            try:
                qtype = qtype_number(type_text)
            except ValueError as e:
                raise DohRequestError(str(e)) from None
        except DohRequestError as e:
            logger.debug("DoH: 400 for name=%r type=%r: %s", name[:300], type_text[:50], e)
            if metrics is not None:
                metrics.drop("doh_bad_request")
            return _bad_request(str(e))
        if results is None:
            result, known = answer_query(resolver, normalize_name(labels), qtype), False
        else:
            result, known = results(normalize_name(labels), qtype)
        cd = (_param(request, "cd") or "").lower() in _TRUE
        if metrics is not None:
            metrics.query(qtype_name(qtype), result.rcode, "doh", "cache" if known else "full")
        max_age = _max_age(result)
        headers = {
            **_CORS,
            "Cache-Control": "no-store" if max_age is None else f"max-age={max_age}",
        }
        return JSONResponse(
            doh_json(result, name, labels, qtype, cd=cd),
            headers=headers,
            media_type=DOH_MEDIA_TYPE,
        )

    return resolve


def doh_route(
    resolver: Resolver,
    *,
    path: str = "/resolve",
    metrics: DnsMetrics | None = None,
    generation: Callable[[], object] | None = None,
) -> Route:
    """A Starlette route answering DNS-over-HTTPS JSON queries at `path` (GET, HEAD, OPTIONS)."""
    return Route(
        path,
        doh_endpoint(resolver, metrics=metrics, generation=generation),
        methods=["GET", "HEAD", "OPTIONS"],
        name="dns-over-https",
    )
