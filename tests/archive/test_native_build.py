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


HIDE = r"""
set -e
for h in /usr/include/zstd.h /usr/include/zstd_errors.h /usr/include/zdict.h; do
  if [ -e "$h" ]; then mount --bind "$ERROR_H" "$h"; fi
done
for a in /usr/lib/*/libzstd.a; do if [ -e "$a" ]; then mount --bind /dev/null "$a"; fi; done
"$PY" setup.py build_ext --build-lib "$OUT/lib" --build-temp "$OUT/temp" --force
"""


@pytest.mark.slow
def test_core_builds_where_the_system_has_no_zstd_headers(tmp_path: Path) -> None:
    """The build with the system's zstd headers made unusable (a private mount namespace).

    What a board without ``libzstd-dev`` sees: the core still gets its zstd decoder.
    """
    import os
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private mount namespace")
    error_h = tmp_path / "zstd.h"
    error_h.write_text('#error "the system zstd.h was included"\n')
    env = dict(os.environ, ERROR_H=str(error_h), OUT=str(tmp_path), PY=sys.executable)
    env.pop("CDML_EDGE_ZSTD", None)
    res = subprocess.run(
        ["unshare", "--mount", "bash", "-c", HIDE],
        cwd=NATIVE.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    if "mount" in res.stderr and "permission denied" in res.stderr.lower():
        pytest.skip("mount namespaces are not allowed here")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "zstd decoder: libzstd from the bundled sources" in res.stderr
    assert "native archive core not built" not in res.stderr, res.stderr[-2000:]
    (so,) = (tmp_path / "lib" / "cdml_edge" / "archive" / "_native").glob("_reader*.so")
    code = so.read_bytes()
    assert b"ZSTD_decompressDCtx" in code and b"libzstd.so" not in code
