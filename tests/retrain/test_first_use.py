"""Smaller first-use findings in ``--split``, configuration errors and replay's summary.

``--split`` sums, an unset ``${VAR}`` beside other config errors, and what replay's summary
says about windows retained unscored and ``--model`` files that matched nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agent_runs import jpeg
from helpers.models import brightness_classifier, mfcc_anomaly
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.config import ConfigError, parse_config
from cdml_edge.retrain.errors import ExportError
from cdml_edge.retrain.layout import parse_split


@pytest.mark.parametrize("text", ["0.5/0.6", "60/50", "0.5/0.3/0.1", "0.9/0.2/0.1", "1/1"])
def test_split_fractions_must_add_up(text: str) -> None:
    with pytest.raises(ExportError, match="add up to"):
        parse_split(text)


@pytest.mark.parametrize(
    ("text", "parts"),
    [("0.8/0.1/0.1", (0.8, 0.1, 0.1)), ("80/10/10", (0.8, 0.1, 0.1)), ("0.75/0.25", (0.75, 0.25))],
)
def test_split_fractions_and_percentages(text: str, parts: tuple[float, ...]) -> None:
    assert parse_split(text) == pytest.approx(parts)


def test_an_unset_variable_does_not_hide_the_other_problems(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CDML_TEST_UNSET_A", raising=False)
    data = {
        "device": {"id": "${CDML_TEST_UNSET_A}"},
        "sources": [{"name": "cam", "path": "/data/cam", "modality": "image", "widnow": {}}],
        "pack": {"format": "rar"},
    }
    with pytest.raises(ConfigError) as info:
        parse_config(data, "factory.yaml")
    paths = [p for p, _ in info.value.problems]
    assert paths[0] == "device.id" and "CDML_TEST_UNSET_A" in info.value.problems[0][1]
    assert "sources[0].widnow" in paths and "pack.format" in paths
    # the variable alone is still an error, with nothing else wrong
    with pytest.raises(ConfigError, match=r"device\.id: environment variable CDML_TEST_UNSET_A"):
        parse_config({"device": {"id": "${CDML_TEST_UNSET_A}"}}, "factory.yaml")


# -- replay's summary ----------------------------------------------------------------------


def _ring(ring: Path, runners: dict[str, Any], values: list[list[int]]) -> None:
    """Windows of flat grey JPEGs scored live by ``runners`` (none: retained unscored)."""
    from cdml_edge.store.retention import RetentionRing
    from cdml_edge.window.items import Item, Window
    from cdml_edge.window.pack import pack_window
    from cdml_edge.window.payloads import item_id
    from cdml_edge.window.score import score_window

    store = RetentionRing(ring, max_bytes=10**9, fsync=False)
    for w, vals in enumerate(values):
        opened = 1_790_000_000.0 + 10 * w
        win = Window(window_id=f"cam1-w{w:03d}", source="cam1", opened_ts=opened)
        for i, v in enumerate(vals):
            data, name, ns = jpeg(v), f"f{w}_{i}.jpg", int((opened + i) * 1e9)
            win.items.append(
                Item(
                    "cam1",
                    name,
                    "image",
                    ns / 1e9,
                    data,
                    item_id("cam1", name, len(data), ns),
                    None,
                    len(data),
                    ns,
                )
            )
        win.closed_ts = opened + 5
        packed = pack_window(win, device="edge-1", modality="image", archive_format="zip")
        outcome = score_window(packed.archive, runners, device="edge-1", archive_name=packed.name)
        assert store.store(packed.archive, outcome.manifest).stored
    store.close()


@pytest.fixture
def unscored(tmp_path: Path) -> Path:
    model = brightness_classifier(tmp_path / "brightness.onnx")
    _ring(tmp_path / "ring", {}, [[10, 200], [250]])  # the line ran without a model
    cfg = {"models": {"image": {"path": model.name}}, "retention": {"dir": "ring"}}
    (tmp_path / "factory.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path


def test_windows_retained_unscored_are_first_verdicts_not_changes(unscored: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "replay",
            "--config",
            str(unscored / "factory.yaml"),
            "-q",
            "--out",
            str(unscored / "r.jsonl"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "0 labels and 0 anomaly flags changed, 3 first verdicts" in res.stdout


def test_a_model_that_matched_nothing_is_named(unscored: Path) -> None:
    audio = mfcc_anomaly(unscored / "mic.onnx")
    res = CliRunner().invoke(
        app,
        [
            "replay",
            "--config",
            str(unscored / "factory.yaml"),
            "-q",
            "--model",
            str(audio),
            "--out",
            str(unscored / "r.jsonl"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert f"--model {audio} (audio) matched no item (the windows hold image)" in res.stdout
    res = CliRunner().invoke(
        app,
        [
            "replay",
            "--config",
            str(unscored / "factory.yaml"),
            "-q",
            "--model",
            str(unscored / "brightness.onnx"),
            "--out",
            str(unscored / "r.jsonl"),
        ],
    )
    assert res.exit_code == 0 and "matched no item" not in res.stdout, res.output
