"""Fixtures of the batch pool's review tests (``pytestmark`` names ``collect_after``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.dataset_data import class_images, write


@pytest.fixture
def collect_after() -> Iterator[None]:
    """Batches in a failed test's frames: collected, so later workers inherit no mapping."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def pool_pets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve small labelled images in a ZIP."""
    return write(tmp_path_factory.mktemp("review") / "pets.zip", class_images(4))
