"""``CDMLStreamDataset(orientation=...)``: EXIF orientation reaches every decode."""

from __future__ import annotations

import io
import zipfile

import cv2
import numpy as np
import pytest

from cdml_edge import CDMLStreamDataset


def _rotated_jpeg() -> bytes:
    """A 96x64 JPEG whose EXIF orientation (6) says: turn it a quarter clockwise."""
    img = np.zeros((64, 96, 3), np.uint8)
    img[:16, :24] = 255
    jpeg = cv2.imencode(".jpg", img)[1].tobytes()
    tiff = b"MM\0*\0\0\0\x08\0\x01" + b"\x01\x12\0\x03\0\0\0\x01\0\x06\0\0" + b"\0\0\0\0"
    app1 = b"Exif\0\0" + tiff
    return jpeg[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + jpeg[2:]


@pytest.mark.parametrize(("orientation", "shape"), [("exif", (3, 96, 64)), ("raw", (3, 64, 96))])
def test_the_dataset_turns_jpegs_as_asked(orientation: str, shape: tuple[int, ...]) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a/x.jpg", _rotated_jpeg())
    ds = CDMLStreamDataset(buf.getvalue(), modality="image", orientation=orientation)  # type: ignore[arg-type]
    assert tuple(ds[0].shape) == shape
    small = CDMLStreamDataset(
        buf.getvalue(),
        modality="image",
        orientation=orientation,
        target_size=(16, 24),  # type: ignore[arg-type]
    )
    assert tuple(small[0].shape) == (3, 24, 16)


def test_an_unknown_orientation_is_refused() -> None:
    with pytest.raises(ValueError, match="orientation must be one of exif, raw"):
        CDMLStreamDataset(b"", modality="image", orientation="upright")  # type: ignore[arg-type]
