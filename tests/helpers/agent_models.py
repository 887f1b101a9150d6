"""Fixture ``models``: the two ONNX models of :func:`helpers.agent_runs.write_config`."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """``brightness.onnx`` (image) and ``level.onnx`` (csv, window 8) in ``tmp_path/models``."""
    from helpers.models import brightness_classifier, level_anomaly

    d = tmp_path / "models"
    d.mkdir()
    brightness_classifier(d / "brightness.onnx")
    level_anomaly(d / "level.onnx", window=8)
    return d
