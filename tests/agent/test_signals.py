"""The agent restores the signal handlers it replaced.

Whoever embeds it (a test through CliRunner, a notebook, a service of its own) keeps its
Ctrl-C afterwards.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import pytest
import yaml
from helpers.models import brightness_classifier

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _agent(tmp_path: Path, model: str = "brightness.onnx") -> Agent:
    brightness_classifier(tmp_path / "brightness.onnx")
    (tmp_path / "in").mkdir()
    path = tmp_path / "factory.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "sources": [{"name": "cam", "path": "in", "modality": "image"}],
                "models": {"image": {"path": model}},
                "output": {"jsonl": "out.jsonl"},
                "state_dir": "state",
            }
        )
    )
    return Agent(load_config(path), path)


def _mine(signum: int, frame: FrameType | None) -> None:
    """An embedder's own handler."""


@pytest.fixture
def own_handlers():
    before = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _mine)
    yield
    for s, h in before.items():
        signal.signal(s, h)


@pytest.mark.usefixtures("own_handlers")
def test_run_puts_back_the_handlers_it_replaced(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    seen: dict[int, object] = {}
    start = agent.start

    def start_and_look(runners=None) -> None:  # while it runs, the agent's handlers are in
        seen.update({s: signal.getsignal(s) for s in SIGNALS})
        start(runners)

    agent.start = start_and_look  # type: ignore[method-assign]
    assert agent.run(duration=0.2) == 0
    assert all(h is not _mine for h in seen.values())
    assert all(signal.getsignal(s) is _mine for s in SIGNALS)


@pytest.mark.usefixtures("own_handlers")
def test_a_start_that_fails_puts_them_back_too(tmp_path: Path) -> None:
    agent = _agent(tmp_path)

    def broken(runners=None) -> None:
        raise RuntimeError("model would not load")

    agent.start = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="would not load"):
        agent.run(duration=0.2)
    assert all(signal.getsignal(s) is _mine for s in SIGNALS)


def test_start_runs_its_named_steps_in_order(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    order: list[str] = []
    for step in (
        "init_state_lock",
        "start_health_endpoint",
        "init_models",
        "init_decoders",
        "init_retention",
        "start_pipeline",
        "start_sources",
        "announce_ready",
    ):
        real = getattr(agent, step)
        setattr(agent, step, lambda *a, _real=real, _name=step: (order.append(_name), _real(*a))[1])
    agent.start()
    try:
        assert order == [
            "init_state_lock",
            "start_health_endpoint",
            "init_models",
            "init_decoders",
            "init_retention",
            "start_pipeline",
            "start_sources",
            "announce_ready",
        ]
    finally:
        agent.stop()
