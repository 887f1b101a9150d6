"""The test suite's root: the shared fixtures (``pytest_plugins``) and the markers by folder.

Layout: one folder per package of ``cdml_edge`` (``core/`` for the ground floor: modality,
fsio, backoff, supervisor, units, errors; ``dataset/`` for ``cdml_edge.data``, since
``data/`` holds test data), plus ``e2e/`` (the whole system end to end), ``docs/`` (README,
docs site, notebook, CLI documentation) and ``release/`` (install, lock, systemd). Test
file basenames are unique across folders: pytest's default import mode imports each test
module by its basename, and so do the child processes and spawned workers of some tests.

Helper modules live in ``tests/helpers/`` (``tests/`` is on ``sys.path`` through the
``pythonpath`` setting): tests import plain helpers from ``helpers.<module>`` and take
fixtures by name, without importing them. The fixture modules import nothing heavy at
import time, so that collecting a test does not pay for what it does not use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = [
    "helpers.agent_models",  # models (the ONNX models of helpers.agent_runs.write_config)
    "helpers.archives",  # engine (both archive engines: C core and pure Python)
    "helpers.broker_port",  # broker_port (the shared Mosquitto, else a broker of our own)
    "helpers.full_disk",  # full_disk (a real full tmpfs, and an injected ENOSPC)
    "helpers.ray_cluster",  # ray_cluster (a local 2-CPU Ray, once per session)
    "helpers.ray_nodes",  # ray_nodes (a head and a worker node started with `ray start`)
    "helpers.s3_server",  # s3_server (moto's S3 server on loopback behind a counting proxy)
]


# Markers by place, so that a test's folder says how it runs (registered in pyproject.toml):
# the whole-system runs of tests/e2e/ and the release checks of tests/release/ are slow, and
# so are soak and matrix tests wherever they live. `make test-fast` leaves slow tests out;
# `make test` runs everything.
FOLDER_MARKERS = {
    "e2e": ("e2e", "slow"),
    "release": ("release", "slow"),
    "docs": ("docs",),
}
NAME_MARKERS = {  # a word in the file name -> markers
    "soak": ("soak", "slow"),
    "matrix": ("matrix", "slow"),
}
TESTS = Path(__file__).resolve().parent


def markers_for(path: Path) -> list[str]:
    """The markers a test file gets from its folder under ``tests/`` and its name."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:  # not under tests/
        return []
    names = list(FOLDER_MARKERS.get(parts[0], ())) if len(parts) > 1 else []
    for word, marks in NAME_MARKERS.items():
        if word in path.stem:
            names += marks
    return list(dict.fromkeys(names))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    by_file: dict[Path, list[str]] = {}
    for item in items:
        path = Path(item.path)
        if path not in by_file:
            by_file[path] = markers_for(path)
        for name in by_file[path]:
            item.add_marker(name)


@pytest.fixture(scope="session", autouse=True)
def _seekable_cache_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Seekable copies of stock tar.zst archives go to a folder of the session's own.

    ``CDMLStreamDataset`` makes them by default, in the user's cache folder otherwise.
    """
    import os

    os.environ.setdefault("CDML_EDGE_SEEKABLE_CACHE", str(tmp_path_factory.mktemp("seekable")))


@pytest.fixture(autouse=True)
def _no_disk_probe_left_running() -> Iterator[None]:
    """A store or spool left degraded and open goes on probing its disk after its test.

    Its timer re-arms itself for as long as the process lives, writing into a folder a later
    test may own and starting threads under later tests: close what a test opens.
    """
    yield
    import threading

    left = []
    for thread in threading.enumerate():
        probe = getattr(thread, "function", None)
        owner = getattr(probe, "__self__", None)
        if type(owner).__name__ == "DiskFaults" and not owner._closed:  # type: ignore[union-attr]
            left.append(f"{owner.name} {owner.where}")  # type: ignore[union-attr]
            owner.close()  # type: ignore[union-attr]  # not again under the next test
    assert not left, f"disk probes left running (close the store): {left}"
