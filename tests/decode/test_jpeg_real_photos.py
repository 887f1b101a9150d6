"""The reduced-scale decode on real photos, against a full decode + area resize.

The photos are the sample JPEGs that installed packages ship (matplotlib's Grace Hopper,
scikit-learn's china and flower), found at run time; each is also cut and rescaled to other
sizes and re-encoded, so the set holds real photos of 224 x 224 to 1280 x 854 pixels.
Tolerance per image (docs/dataset.md, "Image decoding"): mean absolute difference and 99th
percentile in levels of 0-255.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import cv2
import numpy as np
import pytest

from cdml_edge.decode import decode_image
from cdml_edge.decode import jpeg as jpeg_mod

TOLERANCE = {224: (2.0, 12), 128: (2.0, 12), 64: (2.0, 12), 32: (2.5, 24)}
"""target -> (mean, 99th percentile) bound per image."""

_SHIPPED = {
    "matplotlib": ["mpl-data/sample_data/grace_hopper.jpg"],
    "sklearn": ["datasets/images/china.jpg", "datasets/images/flower.jpg"],
}


def shipped_photos() -> list[Path]:
    """The sample photos of the installed packages that ship them."""
    found = []
    for package, files in _SHIPPED.items():
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        found += [root / f for f in files if (root / f).is_file()]
    return found


def _sizes(bgr: np.ndarray) -> list[np.ndarray]:
    """The photo, centre crops, smaller and larger versions."""
    h, w = bgr.shape[:2]
    out = [bgr]
    for cw, ch in ((400, 300), (300, 200), (224, 224)):
        if cw <= w and ch <= h:
            y, x = (h - ch) // 2, (w - cw) // 2
            out.append(bgr[y : y + ch, x : x + cw])
    for f in (0.5, 0.75, 2.0):
        size = (int(w * f), int(h * f))
        out.append(
            cv2.resize(bgr, size, interpolation=cv2.INTER_AREA if f < 1 else cv2.INTER_CUBIC)
        )
    return out


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    paths = shipped_photos()
    if len(paths) < 2:
        pytest.skip("fewer than two sample photos installed (matplotlib, scikit-learn)")
    out = []
    for path in paths:
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        assert bgr is not None, path
        for img in _sizes(bgr):
            ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
            assert ok
            out.append(buf.tobytes())
    return out


@pytest.fixture(params=["simplejpeg", "opencv"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "opencv":
        monkeypatch.setenv("CDML_EDGE_JPEG", "opencv")
    return str(request.param)


@pytest.mark.parametrize("target", sorted(TOLERANCE, reverse=True))
def test_reduced_decode_of_real_photos_within_tolerance(
    photos: list[bytes], backend: str, target: int
) -> None:
    mean_tol, p99_tol = TOLERANCE[target]
    checked = 0
    for data in photos:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        h, w = bgr.shape[:2]
        if min(w, h) <= target:
            continue  # the reduced path only shrinks
        want = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (target, target),
                          interpolation=cv2.INTER_AREA)  # fmt: skip
        got = decode_image(data, target_size=target)
        d = np.abs(got.astype(int) - want.astype(int))
        where = f"{w}x{h} -> {target}: mean {d.mean():.2f}, p99 {np.percentile(d, 99):.0f}"
        within = d.mean() <= mean_tol and np.percentile(d, 99) <= p99_tol
        assert within, where
        checked += 1
    assert checked >= 6
    assert jpeg_mod.backend().startswith(backend)
