"""A member that fails to decode names its archive too.

Windows packed by the appliance hold the same member names (``cam1/0001.jpg``) archive
after archive; a retraining set is a ``ConcatDataset`` of many of them. The error of a broken
member must say which archive holds it, in the main process and from a worker alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.dataset_data import class_images, write

from cdml_edge.decode import DecodeError


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("target_size", [None, 16])
def test_decode_error_names_archive_and_member(
    tmp_path: Path, workers: int, target_size: int | None
) -> None:
    from torch.utils.data import ConcatDataset, DataLoader

    from cdml_edge import CDMLStreamDataset

    good = class_images(1)[0][1]
    names = [f"cam1/{i:04d}.jpg" for i in range(4)]
    windows = []
    for w in range(3):
        broken = w == 1
        items = [
            (n, good[: len(good) // 3] if broken and i == 2 else good) for i, n in enumerate(names)
        ]
        windows.append(write(tmp_path / f"window-{w}.zip", items))
    sets = [CDMLStreamDataset(p, is_image=True, target_size=target_size) for p in windows]
    loader = DataLoader(
        ConcatDataset(sets), batch_size=4 if target_size else 1, num_workers=workers
    )
    with pytest.raises(DecodeError) as err:
        for _ in loader:
            pass
    text = str(err.value)
    assert "cam1/0002.jpg" in text and str(windows[1]) in text
    assert str(windows[0]) not in text and str(windows[2]) not in text
    if workers == 0:
        assert err.value.member == "cam1/0002.jpg"
