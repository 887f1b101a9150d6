"""Every configuration on the "Bring your own model" page (docs/byom.md) is valid as written."""

from __future__ import annotations

import re

import pytest
import yaml
from helpers.docs_pages import page

from cdml_edge.config import parse_config


def _blocks() -> list[str]:
    section = page("byom").read_text(encoding="utf-8")
    return re.findall(r"```yaml\n(.*?)```", section, flags=re.S)


def test_the_section_shows_every_output_kind() -> None:
    kinds = {m for b in _blocks() for m in re.findall(r"kind: (\w+)", b)}
    assert kinds >= {"classifier", "anomaly", "embedding", "detector", "camera"}
    assert sum("format: ssd" in b for b in _blocks()) == 1


@pytest.mark.parametrize("block", _blocks(), ids=lambda b: b.splitlines()[1].strip()[:40])
def test_each_config_block_parses(block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAM_PASSWORD", "secret")
    cfg = parse_config(yaml.safe_load(block), "docs/byom.md")
    assert cfg.models
    for source in cfg.sources:
        assert cfg.models_of(source) == source.models
