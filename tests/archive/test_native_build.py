"""The C core's zstd decoder: always built, from the bundled sources unless asked otherwise."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from cdml_edge.archive.native import backends, frame_decoder

NATIVE = Path(__file__).resolve().parents[2] / "cdml_edge" / "archive" / "_native"


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cz_build", NATIVE / "cffi_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_built_core_decodes_zstd_with_the_bundled_libzstd() -> None:
    found = backends()
    assert found["zstd"] == "libzstd 1.5.6 (bundled)", found
    assert frame_decoder() is not None
    (so,) = NATIVE.glob("_reader*.so")
    assert b"libzstd.so" not in so.read_bytes()  # nothing to find on the board at run time


def test_zstd_choice_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    build = _build_module()
    monkeypatch.delenv("CDML_EDGE_ZSTD", raising=False)
    monkeypatch.delenv("CDML_EDGE_NO_LIBZSTD", raising=False)
    assert build.zstd_choice() == "bundled"
    monkeypatch.setenv("CDML_EDGE_ZSTD", "system")
    assert build.zstd_choice() == "system"
    monkeypatch.setenv("CDML_EDGE_NO_LIBZSTD", "1")
    assert build.zstd_choice() == "none"
    monkeypatch.delenv("CDML_EDGE_NO_LIBZSTD")
    monkeypatch.setenv("CDML_EDGE_ZSTD", "static")
    with pytest.raises(ValueError, match="bundled, system or none"):
        build.zstd_choice()


@pytest.mark.parametrize("asm", [True, False])
def test_bundled_build_needs_no_system_zstd(monkeypatch: pytest.MonkeyPatch, asm: bool) -> None:
    monkeypatch.delenv("CDML_EDGE_ZSTD", raising=False)
    monkeypatch.delenv("CDML_EDGE_NO_LIBZSTD", raising=False)
    build = _build_module()
    kwds = build.make_builder(asm=asm)._assigned_source[3]
    assert "zstd" not in kwds["libraries"]
    assert any(s.endswith("decompress/zstd_decompress.c") for s in kwds["sources"])
    assert any(s.endswith(".S") for s in kwds["sources"]) == asm
    assert (("ZSTD_DISABLE_ASM", "1") in kwds["define_macros"]) == (not asm)
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc to preprocess with")
    args = [f"-I{d}" for d in kwds["include_dirs"]] + ["-DCZ_HAVE_ZSTD=1", "-D_XOPEN_SOURCE=700"]
    out = subprocess.run(
        [gcc, "-E", *args, str(NATIVE / "frames.c")], capture_output=True, text=True, check=True
    ).stdout
    assert f'"{NATIVE / "zstd" / "zstd.h"}"' in out  # the header the build compiles against
    assert '"/usr/include/zstd.h"' not in out
