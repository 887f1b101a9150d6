"""A torch Dataset that says which process read each item, for the DataLoader worker tests.

It lives here, not in the test module, so that spawned workers can unpickle it by name and
collecting the tests does not import torch (only the tests that use it import this).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from torch.utils.data import Dataset

if TYPE_CHECKING:
    from cdml_edge import CDMLStreamDataset


class Probe(Dataset[Any]):
    """Returns each item with the pid that read it and the pid the dataset opened in."""

    def __init__(self, ds: CDMLStreamDataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> tuple[Any, int, int, int]:
        x, y = self.ds[i]
        return x, y, os.getpid(), self.ds._pid
