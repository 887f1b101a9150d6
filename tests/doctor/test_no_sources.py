"""A configuration without sources: ``doctor`` and the agent's start say it watches nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config
from cdml_edge.doctor import diagnose


def test_doctor_warns_about_a_configuration_without_sources(tmp_path: Path) -> None:
    config = tmp_path / "empty.yaml"
    config.write_text("# nothing yet\n")
    report = diagnose(config, timeout_s=1.0, unit=None)
    warned = [c for c in report.checks if c.name == "sources"]
    assert len(warned) == 1 and warned[0].warn and warned[0].ok
    assert "watch nothing" in warned[0].detail


def test_the_agent_says_it_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "empty.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\noutput: {{jsonl: {tmp_path / 'o.jsonl'}}}\n"
    )
    agent = Agent(load_config(config), config)
    with caplog.at_level(logging.WARNING):
        agent.start()
        agent.stop()
    assert any("watch nothing" in r.getMessage() for r in caplog.records)
