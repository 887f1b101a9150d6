"""The README's first example, end to end, as a new user runs it from the root of a clone.

Its ``factory.yaml`` block is written as ``factory.yaml`` beside a copy of ``models/``, its
command line runs as written in bash with ``cdml-edge`` on the ``PATH`` (``config validate``
and then ``run``), a digit dropped into the watched folder comes out on the broker the
configuration names, and the agent stops on SIGTERM with exit status 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.agent_runs import wait_for
from helpers.docs_pages import README, ROOT, cli_env, page_blocks, where
from helpers.mqtt_brokers import BrokerProcess, Subscriber, port_open

from cdml_edge import synth

SETUP = "first-example"


def _example() -> tuple[str, str]:
    """The YAML and the bash block of the README marked ``runnable: first-example``."""
    blocks = page_blocks(where(README), README.read_text().splitlines())
    mine = {b.lang: b.code for b in blocks if b.setup == SETUP}
    assert set(mine) == {"yaml", "bash"}, mine
    return mine["yaml"], mine["bash"]


@pytest.fixture
def broker_on_1883(tmp_path: Path) -> Iterator[int]:
    """The broker the example names (localhost:1883): the machine's, or one started here."""
    if port_open(1883):
        yield 1883
        return
    broker = BrokerProcess(tmp_path / "broker", port=1883).start()
    try:
        yield 1883
    finally:
        broker.stop()


def test_the_readme_first_example_runs_as_written(tmp_path: Path, broker_on_1883: int) -> None:
    config, command = _example()
    assert config.startswith("# factory.yaml\n")
    (tmp_path / "factory.yaml").write_text(config)
    shutil.copytree(ROOT / "models", tmp_path / "models")
    cfg = yaml.safe_load(config)
    topic = f"cdml/{cfg['device']['id']}/cam1/result"
    sub = Subscriber(broker_on_1883, topic, persistent=False)
    env = cli_env()
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        inbox = tmp_path / "incoming" / "cam1"
        wait_for(inbox.is_dir, 60, "the agent to create its watched folder")
        glyphs, _, _ = synth.load_digit_glyphs()
        name = f"part-{uuid.uuid4().hex[:8]}.png"
        frame = synth.render_digit(glyphs[7], np.random.default_rng(7), 64)
        (inbox / f".{name}").write_bytes(synth.encode_png(frame))
        (inbox / f".{name}").rename(inbox / name)  # a producer's atomic write

        def mine() -> list[dict]:
            return [m for m in sub.on("/result") if m["item"] == name]

        wait_for(lambda: bool(mine()), 60, "the result on the broker")
        wait_for(lambda: not (inbox / name).exists(), 30, "on_done: delete")
    finally:
        sub.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    result = mine()[0]
    assert result["source"] == "cam1" and result["modality"] == "image"
    assert result["label"] in [str(d) for d in range(10)] and 0 <= result["score"] <= 1
    assert proc.returncode == 0, out
    assert out.startswith("factory.yaml: valid (1 source, 1 model, mqtt: mqtt://localhost:1883")
    assert "Traceback" not in out
