"""Fixtures of the batch pool's and kept mappings' tests (``pytestmark`` names ``collect_after``).

A test of the kept mappings takes ``fresh``: this process's, new for the test.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.dataset_data import class_images, write

from cdml_edge.data import kept_mappings


@pytest.fixture
def collect_after() -> Iterator[None]:
    """Batches in a failed test's frames: collected, so later workers inherit no mapping."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def pool_pets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve small labelled images in a ZIP."""
    return write(tmp_path_factory.mktemp("review") / "pets.zip", class_images(4))


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[kept_mappings.KeptMappings]:
    """This process's kept mappings, new for the test (the default bound)."""
    kept = kept_mappings.KeptMappings(kept_mappings.bound_bytes())
    monkeypatch.setattr(kept_mappings, "_KEPT", kept)
    yield kept
