"""The DNS server's and the DoH endpoint's Prometheus metrics (:class:`DnsMetrics`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["DnsMetrics", "Transport"]

Transport = Literal["udp", "tcp", "doh"]
"""How a DNS query came: what the metrics count it under."""

_QTYPE_LABELS: Final = frozenset(
    {"A", "AAAA", "ANY", "CAA", "CNAME", "HTTPS", "MX", "NS", "PTR", "SOA", "SRV", "SVCB", "TXT"}
)


class DnsMetrics:
    """Counters for the DNS server and the DoH endpoint, in `registry` (its own by default).

    ``rideout_dns_queries_total{qtype,rcode,transport}``: every query answered (qtype
    ``other`` for rarely seen types, ``none`` when the question could not be read);
    ``rideout_dns_answers_total{transport,path}``: the same answers by how they were made,
    ``cache`` (a precomputed reply, only the id and question copied in) or ``full``
    (parsed and encoded); ``rideout_dns_truncated_total{transport}``: answers too large
    for the client's UDP size, sent with TC=1; ``rideout_dns_dropped_total{reason}``:
    datagrams and connections given no answer; ``rideout_dns_tcp_connections``: open TCP
    connections; ``rideout_dns_udp_receive_buffer_bytes``: the socket buffer the kernel
    granted; ``rideout_dns_cached_answers`` and ``rideout_dns_cache_rebuilds_total``:
    the precomputed replies of the view in force, and how often a new view emptied them.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        # Counted in a plain dict (a labelled Counter's lock and checks cost more than the
        # cached answer itself) and exported by `_QueryCounts` when scraped.
        self.counts: dict[tuple[str, str, str, str], int] = {}
        r.register(_QueryCounts(self.counts))
        self.truncated = Counter(
            "rideout_dns_truncated",
            "DNS answers too large for the client's UDP payload size, sent with TC=1.",
            ["transport"],
            registry=r,
        )
        self.dropped = Counter(
            "rideout_dns_dropped",
            "DNS messages or connections dropped without an answer, by reason.",
            ["reason"],
            registry=r,
        )
        self.tcp_connections = Gauge(
            "rideout_dns_tcp_connections", "Open DNS-over-TCP connections.", registry=r
        )
        self.udp_receive_buffer = Gauge(
            "rideout_dns_udp_receive_buffer_bytes",
            "SO_RCVBUF of the DNS server's UDP socket, as the kernel granted it.",
            registry=r,
        )
        self.cached_answers = Gauge(
            "rideout_dns_cached_answers",
            "Precomputed DNS replies held for the view in force.",
            registry=r,
        )
        self.cache_rebuilds = Counter(
            "rideout_dns_cache_rebuilds",
            "Times a new DNS view emptied the precomputed replies.",
            registry=r,
        )

    def query(
        self, qtype: str | None, rcode: str, transport: Transport, path: str = "full"
    ) -> None:
        label = "none" if qtype is None else qtype if qtype in _QTYPE_LABELS else "other"
        key = (label, rcode, transport, path)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1

    def drop(self, reason: str) -> None:
        self.dropped.labels(reason).inc()


class _QueryCounts(Collector):
    """``rideout_dns_queries_total`` and ``rideout_dns_answers_total`` from the counts."""

    def __init__(self, counts: dict[tuple[str, str, str, str], int]) -> None:
        self.counts = counts

    def collect(self) -> Iterable[Metric]:
        queries = CounterMetricFamily(
            "rideout_dns_queries",
            "DNS queries answered, by type, response code and transport.",
            labels=["qtype", "rcode", "transport"],
        )
        answers = CounterMetricFamily(
            "rideout_dns_answers",
            "DNS answers by transport and path: cache (precomputed reply) or full.",
            labels=["transport", "path"],
        )
        by_query: dict[tuple[str, str, str], int] = {}
        by_path: dict[tuple[str, str], int] = {}
        for (qtype, rcode, transport, path), n in list(self.counts.items()):
            by_query[(qtype, rcode, transport)] = by_query.get((qtype, rcode, transport), 0) + n
            by_path[(transport, path)] = by_path.get((transport, path), 0) + n
        for labels, n in sorted(by_query.items()):
            queries.add_metric(labels, n)
        for path_labels, n in sorted(by_path.items()):
            answers.add_metric(path_labels, n)
        yield queries
        yield answers
