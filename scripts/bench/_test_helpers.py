"""Helpers of the tests that benchmarks borrow (a broker, a fixture model, an S3 proxy).

``borrow("_mqtt_brokers")`` puts the folder that holds ``_mqtt_brokers.py`` on ``sys.path``;
the module is found by its file name anywhere below ``tests/``, so a benchmark keeps working
however the tests are laid out in folders.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests"


def borrow(*modules: str) -> None:
    """Make each of ``modules`` (helper modules of the tests) importable."""
    for name in modules:
        found = sorted(TESTS.rglob(f"{name}.py"))
        if not found:
            raise SystemExit(f"no {name}.py below {TESTS}: the benchmark needs it")
        folder = str(found[0].parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
