"""deploy/'s Prometheus alert rules and Grafana dashboard: promtool accepts the rules
and their unit tests pass, every alert has a test that fires and one that stays quiet
and a runbook line in docs/production.md, every dashboard query is valid PromQL, and
every metric and label they use is one rideout declares (the live check, against a
running deployment's /metrics, is in tests/cluster/test_up_e2e.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import alerting
from tests.alerting import DASHBOARD, ROOT, RULE_TESTS, RULES, Use

PRODUCTION = ROOT / "docs" / "production.md"


@pytest.fixture(scope="module")
def promtool() -> str:
    """Debian's promtool (package prometheus, which ./dev installs as root): skipped
    where it is missing, except on CI, where it must be there."""
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (apt install prometheus; ./dev test does as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: CI must check the alert rules")
        pytest.skip(message)
    return found


def run(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_accepts_the_rules(promtool: str) -> None:
    result = run(promtool, "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerting.rules())} rules found" in result.stdout


def test_the_rules_unit_tests_pass(promtool: str) -> None:
    result = run(promtool, "test", "rules", RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_dashboard_query_is_promql(promtool: str, tmp_path: Path) -> None:
    """Each query as a recording rule, which promtool parses."""
    queries = alerting.dashboard_queries()
    assert len(queries) > 40
    group = {"name": "dashboard", "rules": [
        {"record": f"rideout:dashboard_query:{n}", "expr": q} for n, q in enumerate(queries)
    ]}  # fmt: skip
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [group]}))
    result = run(promtool, "check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_test_that_fires_and_one_that_stays_quiet() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    fires: set[str] = set()
    quiet: set[str] = set()
    for test in tests["tests"]:
        for case in test.get("alert_rule_test", []):
            (fires if case["exp_alerts"] else quiet).add(case["alertname"])
    alerts = {rule["alert"] for rule in alerting.rules()}
    assert len(alerts) == len(alerting.rules())  # alerts only, each named once
    assert alerts - fires == set(), "alerts with no test that fires them"
    assert alerts - quiet == set(), "alerts with no test that they stay quiet"
    assert fires | quiet <= alerts


def test_every_alert_is_labelled_and_explained() -> None:
    text = PRODUCTION.read_text()
    for rule in alerting.rules():
        assert rule["labels"]["severity"] in ("page", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["runbook"] == "docs/production.md#alerts-and-dashboards"
        assert f"`{rule['alert']}`" in text, f"docs/production.md does not explain {rule['alert']}"
    assert "## Alerts and dashboards" in text


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    data = json.loads(DASHBOARD.read_text())
    assert (data["uid"], data["title"]) == ("rideout", "rideout")
    assert data["templating"]["list"][0] == {**data["templating"]["list"][0],
                                              "name": "datasource", "type": "datasource",
                                              "query": "prometheus"}  # fmt: skip
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    for panel in data["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]


def test_the_extractor_reads_the_forms_deploy_uses() -> None:
    query = (
        "max by (region, zone) (rideout_epoch * on (instance) group_left (region, zone) "
        "rideout_app_info) + sum by (le) (rate(rideout_fanout_latency_seconds_bucket[5m])) "
        '+ rideout_alarm_state{state="ALARM", instance=~"a{b}"}'
    )
    found = alerting.uses(query)
    metrics = {"rideout_epoch", "rideout_app_info"}
    assert Use(query, frozenset({"region", "zone"}), frozenset(metrics)) in found
    assert (
        Use(query, frozenset({"le"}), frozenset({"rideout_fanout_latency_seconds_bucket"})) in found
    )
    assert Use(query, frozenset({"state"}), frozenset({"rideout_alarm_state"})) in found
    assert alerting.used_metrics([query]) == {
        *metrics,
        "rideout_fanout_latency_seconds_bucket",
        "rideout_alarm_state",
    }
    exported = {"rideout_epoch": frozenset(), "rideout_app_info": frozenset({"region"}),
                "rideout_fanout_latency_seconds_bucket": frozenset({"le"}),
                "rideout_alarm_state": frozenset({"alarm", "state"})}  # fmt: skip
    # Once for by's argument, once for group_left's scope (the whole query).
    assert alerting.problems([query], exported) == [
        f"{sorted(scope)} have no label ['zone'] (in {query!r})"
        for scope in [{*metrics, "rideout_alarm_state", "rideout_fanout_latency_seconds_bucket"},
                      metrics]
    ]  # fmt: skip
    assert alerting.problems(["rideout_nope"], exported) == [
        "rideout_nope is not exported (in 'rideout_nope')"
    ]


def test_every_metric_and_label_used_is_declared(tmp_path: Path) -> None:
    declared = alerting.declared_here(tmp_path)
    all_queries = alerting.queries()
    assert alerting.problems(all_queries, declared) == []
    # The waiting room's counter gauges, the task deaths: the alerts use them.
    assert {"rideout_room_queue_number", "rideout_task_deaths_total",
            "rideout_process_restarts_total"} <= alerting.used_metrics(all_queries)  # fmt: skip
