"""The decoders' C helpers: a build older than its sources is not used, and make rebuilds it."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from cdml_edge.data import batch as batch_module
from cdml_edge.decode import native

ROOT = Path(__file__).resolve().parents[2]


def test_a_build_without_one_of_the_helpers_counts_as_absent(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An extension built before a helper was added: the Python paths, not AttributeError."""
    stale = types.SimpleNamespace(ffi=object(), lib=types.SimpleNamespace(cdml_area_resize=None))
    monkeypatch.setitem(sys.modules, "cdml_edge.decode._native._area", stale)
    monkeypatch.setattr(native, "_HELPERS", native.OptionalPart(native._load, native.native_off))
    assert native.helpers() is None
    missing = "cdml_count_scans, cdml_scale_to_unit, cdml_csv_numbers"
    assert f"older sources (no {missing})" in caplog.text
    dst = np.empty((4, 4, 3), np.float32)
    batch_module._write(dst, np.full((4, 4, 3), 51, np.uint8), "float32", channels_last=True)
    assert (dst == np.float32(51) / np.float32(255)).all()


def test_make_rebuilds_when_a_decoder_c_source_changes() -> None:
    """The install stamps depend on the decoders' C sources as on the archive reader's."""
    out = subprocess.run(
        ["make", "-p", "-n", "-q", "install-dev"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    native_line = next(ln for ln in out.splitlines() if ln.startswith("NATIVE :="))
    for source in ("area.c", "scans.c", "scale.c", "scale.h", "csvnum.c", "cffi_area.py"):
        assert f"cdml_edge/decode/_native/{source}" in native_line
