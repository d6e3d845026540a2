"""The metrics and labels that deploy/'s alert rules and Grafana dashboard use, and a
check of them against what rideout exports: declared in-process (tests/test_alerts.py)
or scraped from a running deployment (tests/cluster/test_up_e2e.py).

PromQL is read with regular expressions, enough for the queries deploy/ holds (a test
checks the extractor on the forms they use): metric names are ``rideout_[a-z_]+``;
a selector's labels (``name{label="..."}``) belong to its metric; the labels of
``by (...)`` must be exported by a metric inside the aggregation's argument, those of
``on``, ``ignoring``, ``without``, ``group_left`` and ``group_right`` by a metric of the
same query. ``instance`` and ``job`` are Prometheus's target labels, not exported.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from rideout._tasks import TaskSupervisor
from rideout.cluster.metrics import ProcessMetrics
from rideout.cluster.runstate import ProcessRecord, RunState
from rideout.controlplane.metrics import PlaneMetrics
from rideout.dns.feed import ViewFile
from rideout.dns.records import DnsZoneConfig, Endpoint, RegionRecords
from rideout.dns.service import DnsService
from rideout.realtime.metrics import AppMetrics
from rideout.waitingroom.metrics import RoomMetrics

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "rideout-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "rideout-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "rideout.json"

TARGET_LABELS = frozenset({"instance", "job"})
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}

_METRIC = re.compile(r"\b(rideout_[a-z_]+)\b(?!\s*\()")
_SELECTOR = re.compile(r"\b(rideout_[a-z_]+)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True)
class Use:
    """`metrics` must be exported, and each of `labels` by one of them at least."""

    query: str
    labels: frozenset[str]
    metrics: frozenset[str]


def rules() -> list[dict[str, Any]]:
    """Every rule of the rules file."""
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    """Every target's query in the dashboard, Grafana's variables given values."""
    data = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in _panels(data["panels"]):
        for target in panel.get("targets", []):
            query = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                query = query.replace(variable, value)
            queries.append(query)
    return queries


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def queries() -> list[str]:
    """The alert rules' expressions and the dashboard's queries."""
    return [rule["expr"] for rule in rules()] + dashboard_queries()


def _argument(query: str, start: int) -> str:
    """The parenthesised argument that begins at or after `start` (balanced)."""
    opening = query.index("(", start)
    depth = 0
    for i in range(opening, len(query)):
        depth += {"(": 1, ")": -1}.get(query[i], 0)
        if depth == 0:
            return query[opening : i + 1]
    raise ValueError(f"unbalanced parentheses in {query!r}")


def uses(query: str) -> list[Use]:
    """What `query` needs exported: each selector's labels of its metric, each
    clause's labels of a metric in its scope."""
    bare = _STRING.sub('""', query)
    out = [Use(query, frozenset(), frozenset({m})) for m in _METRIC.findall(bare)]
    for metric, matchers in _SELECTOR.findall(bare):
        labels = frozenset(_MATCHER.findall(matchers)) - TARGET_LABELS
        out.append(Use(query, labels, frozenset({metric})))
    for clause in _CLAUSE.finditer(bare):
        labels = frozenset(x.strip() for x in clause.group(2).split(",") if x.strip())
        scope = _argument(bare, clause.end()) if clause.group(1) == "by" else bare
        metrics = frozenset(_METRIC.findall(scope))
        if labels - TARGET_LABELS:
            out.append(Use(query, labels - TARGET_LABELS, metrics))
    return out


def used_metrics(all_queries: Iterable[str]) -> set[str]:
    return {m for q in all_queries for use in uses(q) for m in use.metrics}


# ------------------------------------------------------------------ what is exported

Exported = Mapping[str, frozenset[str]]
"""Sample name (as PromQL names it: ``rideout_shed_total``, ``..._bucket``) to the
label names its samples carry (or are declared with)."""

_SAMPLES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}


def scraped(text: str) -> dict[str, frozenset[str]]:
    """The sample names and their labels in a ``/metrics`` answer. A labelled metric
    with no child yet has a family but no sample: its names are there, its labels not."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for suffix in _SAMPLES.get(family.type, ("",)):
            found.setdefault(family.name + suffix, set())
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(labels) for name, labels in found.items()}


def declared(*registries: CollectorRegistry) -> dict[str, frozenset[str]]:
    """The sample names and label names the metric objects in `registries` declare,
    children or not, plus what their other collectors yield now.

    prometheus_client has no public accessor for a registry's metric objects or their
    label names: ``_names_to_collectors`` and ``_labelnames`` are read here (both
    unchanged since 0.0.x; a change fails this test, not production)."""
    found: dict[str, set[str]] = {}
    for registry in registries:
        collectors = set(registry._names_to_collectors.values())
        for collector in collectors:
            if isinstance(collector, MetricWrapperBase):
                name, kind = collector._name, collector._type
                labels = set(collector._labelnames)
                for suffix in _SAMPLES.get(kind, ("",)):
                    extra = {"le"} if suffix == "_bucket" else set()
                    found.setdefault(name + suffix, set()).update(labels | extra)
        for family in registry.collect():
            for suffix in _SAMPLES.get(family.type, ("",)):
                found.setdefault(family.name + suffix, set())
            for sample in family.samples:
                found.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(labels) for name, labels in found.items()}


def declared_here(run_dir: Path) -> Exported:
    """Every metric the app server, control plane and name server declare, built
    in-process (the collectors that yield only what they hold are given something)."""
    app = AppMetrics("us-east-1", "use1-az1")
    RoomMetrics(app.registry)
    TaskSupervisor(registry=app.registry)
    plane = CollectorRegistry()
    PlaneMetrics(plane)
    TaskSupervisor(registry=plane)
    RunState(os.getpid(), 0.0, "x", [ProcessRecord("dns", "dns", os.getpid())]).write(run_dir)
    plane.register(ProcessMetrics(run_dir))
    zone = DnsZoneConfig("auction.rideout.test", 1, tuple(
        RegionRecords(region, role, (Endpoint(address, zone),), region)
        for region, role, address, zone in [("us-east-1", "primary", "127.0.1.1", "use1-az1"),
                                            ("us-west-2", "secondary", "127.0.2.1", "usw2-az1")]
    ))  # fmt: skip
    dns = DnsService(zone, ViewFile(run_dir / "dns-view.json"), "127.0.0.1", 0).metrics
    dns.query("A", "NOERROR", "udp")
    return declared(app.registry, plane, dns.registry)


def problems(
    all_queries: Iterable[str], exported: Exported, fallback: Exported | None = None
) -> list[str]:
    """What the queries use that `exported` lacks: a metric, or a label. The labels of
    a metric with no sample (a labelled metric with no child yet) are looked up in
    `fallback`, the metrics' declarations, when given."""

    def labels_of(metric: str) -> frozenset[str]:
        labels = exported.get(metric, frozenset())
        if not labels and fallback is not None:  # no sample: its declaration's labels
            labels = fallback.get(metric, frozenset())
        return labels

    out: list[str] = []
    for query in all_queries:
        for use in uses(query):
            missing = sorted(m for m in use.metrics if m not in exported)
            out.extend(f"{m} is not exported (in {query!r})" for m in missing)
            have = frozenset().union(*(labels_of(m) for m in use.metrics))
            if not missing and not use.labels <= have:
                out.append(
                    f"{sorted(use.metrics)} have no label {sorted(use.labels - have)} "
                    f"(in {query!r})"
                )
    return sorted(set(out))
