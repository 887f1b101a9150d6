"""Fixtures of the agent tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.models import brightness_classifier, level_anomaly


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """The models of :func:`helpers.agent_runs.write_config`, in ``tmp_path/models``.

    ``brightness.onnx`` (image) and ``level.onnx`` (csv, window 8).
    """
    d = tmp_path / "models"
    d.mkdir()
    brightness_classifier(d / "brightness.onnx")
    level_anomaly(d / "level.onnx", window=8)
    return d
