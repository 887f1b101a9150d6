"""spec_dataset: its datasets travel to spawned DataLoader workers (they pickle)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from helpers.dataset_data import class_images, write

from cdml_edge.model.spec import ImageInput, ModelSpec


@pytest.mark.parametrize("raw", [True, False])
def test_spec_dataset_pickles(tmp_path: Path, raw: bool) -> None:
    import torch

    from cdml_edge.nn.data import spec_dataset

    path = write(tmp_path / "pets.zip", class_images(2))
    spec = ModelSpec(
        name="pets",
        modality="image",
        task="classifier",
        input=ImageInput(size=16),
        labels=["cat", "dog", "eel"],
    )
    ds = spec_dataset(path, spec, raw=raw)
    clone = pickle.loads(pickle.dumps(ds))  # what a spawn worker receives
    (x, y), (cx, cy) = ds[3], clone[3]
    assert y == cy == 1
    if raw:
        assert isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.shape == (32, 48, 3)
        np.testing.assert_array_equal(cx, x)
    else:
        assert isinstance(x, torch.Tensor) and x.shape == (3, 16, 16)
        torch.testing.assert_close(cx, x)
