"""A table with more columns than a series model takes: the error says how to pick them.

Before: ``series: expected 3 columns, got 4`` and nothing pointing at ``input.columns``.
"""

from __future__ import annotations

import numpy as np
import pytest

from cdml_edge.model.inputs import SeriesInput
from cdml_edge.model.prepare import prepare_item
from cdml_edge.model.spec import ModelSpec, ModelSpecError


def test_too_many_columns_points_at_input_columns() -> None:
    spec = ModelSpec(
        name="vib",
        modality="timeseries",
        task="anomaly",
        anomaly_threshold=1.0,
        input=SeriesInput(channels=3, window=8),
    )
    with pytest.raises(ModelSpecError) as err:
        prepare_item(spec, np.zeros((8, 4), dtype=np.float32))
    assert "expected 3 columns, got 4" in str(err.value)
    assert "input.columns" in str(err.value)
