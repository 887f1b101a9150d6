"""The shipped Prometheus rules and Grafana dashboard (``deploy/``).

The rules pass ``promtool check`` and their unit tests; every metric the rules and the
dashboard name is one a running agent really exposes; and a real Prometheus scraping a real
agent fires ``CdmlEdgeDown`` once the agent stops.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agent_runs import jpeg, wait_for, write_atomic, write_config
from helpers.ports import free_port
from prometheus_client.parser import text_string_to_metric_families

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "cdml-edge-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "cdml-edge-rules.test.yml"
LOOP_TESTS = DEPLOY / "prometheus" / "cdml-edge-rules.loops.test.yml"
"""The agent under the shipped systemd unit: stall and dead-thread restart loops, healthy."""
DASHBOARD = DEPLOY / "grafana" / "cdml-edge-dashboard.json"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = resp.read()
    return json.loads(body) if body[:1] == b"{" else body.decode()


def _rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def _dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in doc["templating"]["list"] if "definition" in v]
    return exprs


def _named(exprs: list[str]) -> set[str]:
    """The agent's metric names in PromQL expressions (recording rules, with ``:``, aside)."""
    return {m for e in exprs for m in re.findall(r"(?<![\w:])cdml_edge_\w+(?![\w:])", e)}


@pytest.fixture
def agent(tmp_path: Path, models: Path) -> Iterator[tuple[Agent, int]]:
    """A real agent with MQTT to the local Mosquitto and its metrics on a free port."""
    port = free_port()
    cfg_path = write_config(tmp_path)
    doc = yaml.safe_load(cfg_path.read_text())
    doc["health"].update(metrics_port=port, metrics_host="127.0.0.1")
    prefix = f"t{uuid.uuid4().hex[:8]}"  # its own client id too: tests share the broker
    doc["mqtt"] = {"url": "mqtt://127.0.0.1:1883", "topic_prefix": prefix, "client_id": prefix}
    doc["spool"] = {"dir": "spool"}
    cfg_path.write_text(yaml.safe_dump(doc))
    running = Agent(load_config(cfg_path), cfg_path)
    running.start()
    try:
        write_atomic(tmp_path / "in/cam/a.jpg", jpeg(200))
        wait_for(lambda: "cdml_edge_items_total{" in _get(f"http://127.0.0.1:{port}/metrics"))
        yield running, port
    finally:
        running.stop()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")
def test_the_rules_are_valid_and_their_unit_tests_pass() -> None:
    assert PROMTOOL is not None
    check = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = sorted(p.name for p in RULES.parent.glob("*.test.yml"))
    assert RULE_TESTS.name in tests and LOOP_TESTS.name in tests, tests
    unit = subprocess.run(
        [PROMTOOL, "test", "rules", *tests],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert unit.stdout.count("SUCCESS") == len(tests), unit.stdout + unit.stderr


def _alerts() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_the_restart_loops_are_modelled_and_a_healthy_agent_fires_no_alert_at_all() -> None:
    """Every alert, new ones too, is asserted silent on a healthy agent (restarted once).

    And the loops of the shipped unit (WatchdogSec=30s): each run shorter than the `for:` of
    the gauges' alerts, which the promtool tests assert silent there while the counters'
    fire. promtool runs them (the test above); this keeps them complete.
    """
    doc = yaml.safe_load(LOOP_TESTS.read_text())
    by_name = {t["name"]: t for t in doc["tests"]}
    healthy = next(t for name, t in by_name.items() if name.startswith("a healthy agent"))
    silent = {c["alertname"] for c in healthy["alert_rule_test"] if c["exp_alerts"] == []}
    assert silent == _alerts()
    loops = [t for name, t in by_name.items() if not name.startswith("a healthy agent")]
    fired: dict[str, set[str]] = {}
    for case in (c for t in loops for c in t["alert_rule_test"]):
        fired.setdefault(case["alertname"], set()).add("fires" if case["exp_alerts"] else "silent")
    for gauge_alert in ("CdmlEdgeDown", "CdmlEdgeStalled", "CdmlEdgeThreadDead"):
        assert fired[gauge_alert] == {"silent"}, gauge_alert
    for counter_alert in ("CdmlEdgeStalls", "CdmlEdgeRestartLoop", "CdmlEdgeThreadsRestarting"):
        assert "fires" in fired[counter_alert], counter_alert


@pytest.mark.broker
def test_every_metric_the_rules_and_dashboard_name_is_exposed(agent: tuple[Agent, int]) -> None:
    _, port = agent
    text = _get(f"http://127.0.0.1:{port}/metrics")
    exposed = {
        family.name + suffix
        for family in text_string_to_metric_families(text)
        for suffix in SUFFIXES.get(family.type, ("",))
    }
    named = _named(_rule_exprs()) | _named(_dashboard_exprs())
    assert len(named) >= 20, named  # the extraction found the queries' metrics
    assert sorted(named - exposed) == []


def test_the_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "cdml-edge" and doc["panels"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel
        assert panel["datasource"]["uid"] == "${datasource}"


@pytest.mark.slow
@pytest.mark.broker
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package) not installed")
def test_a_real_prometheus_fires_agent_down_when_the_agent_stops(
    agent: tuple[Agent, int], tmp_path: Path
) -> None:
    running, port = agent
    assert PROMETHEUS is not None
    # the shipped rules, with every `for:` cut to 0s and every group evaluated each second
    # (the recording group's own interval is 30 s), so the test needs seconds, not minutes
    rules = tmp_path / "rules.yml"
    text = re.sub(r"(?m)^(\s+)for: \S+$", r"\1for: 0s", RULES.read_text())
    rules.write_text(re.sub(r"(?m)^(\s+)interval: \S+$", r"\1interval: 1s", text))
    web = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "cdml-edge", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{web}/api/v1"
    try:
        wait_for(lambda: _up(api) == "1", timeout=30, what="the agent scraped, up == 1")
        wait_for(
            lambda: _query(api, "cdml_edge:items:rate5m") != [],
            timeout=30,
            what="a recording rule evaluated over the agent's series",
        )
        assert "CdmlEdgeDown" not in _firing(api)
        running.stop()
        wait_for(lambda: "CdmlEdgeDown" in _firing(api), timeout=30, what="CdmlEdgeDown firing")
    finally:
        prom.terminate()
        prom.wait(10)


def _query(api: str, expr: str) -> list[Any]:
    try:
        doc = _get(f"{api}/query?query={urllib.parse.quote(expr)}")
    except OSError:
        return []
    return list(doc["data"]["result"])


def _up(api: str) -> str | None:
    result = _query(api, 'up{job="cdml-edge"}')
    return str(result[0]["value"][1]) if result else None


def _firing(api: str) -> set[str]:
    try:
        doc = _get(f"{api}/alerts")
    except OSError:
        return set()
    time.sleep(0.2)
    return {a["labels"]["alertname"] for a in doc["data"]["alerts"] if a["state"] == "firing"}
