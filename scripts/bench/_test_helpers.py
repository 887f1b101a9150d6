"""Helpers of the tests that benchmarks borrow (a broker, a fixture model, an S3 proxy).

:func:`borrow` puts ``tests/`` on ``sys.path``, so that a benchmark imports
``helpers.<module>`` exactly as the tests do.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests"


def borrow(*modules: str) -> None:
    """Make each of ``modules`` (``tests/helpers/<module>.py``) importable as a helper."""
    for name in modules:
        if not (TESTS / "helpers" / f"{name}.py").is_file():
            raise SystemExit(f"no helpers/{name}.py below {TESTS}: the benchmark needs it")
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
