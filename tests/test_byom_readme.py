"""Every configuration in the README's "Bring your own model" section is valid as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cdml_edge.config import parse_config

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("<!-- section:byom -->", 1)[1].split("<!-- /section:byom -->", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, flags=re.S)


def test_the_section_shows_every_output_kind() -> None:
    kinds = {m for b in _blocks() for m in re.findall(r"kind: (\w+)", b)}
    assert kinds >= {"classifier", "anomaly", "embedding", "detector", "camera"}
    assert sum("format: ssd" in b for b in _blocks()) == 1


@pytest.mark.parametrize("block", _blocks(), ids=lambda b: b.splitlines()[1].strip()[:40])
def test_each_config_block_parses(block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAM_PASSWORD", "secret")
    cfg = parse_config(yaml.safe_load(block), "README")
    assert cfg.models
    for source in cfg.sources:
        assert cfg.models_of(source) == source.models
