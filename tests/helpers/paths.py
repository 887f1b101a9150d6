"""Where things are in the checkout, for tests in any folder under ``tests/``."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
ROOT = TESTS.parent  # the checkout: pyproject.toml, README.md, docs/, scripts/, systemd/ ...
DATA = TESTS / "data"  # test data kept in the repository
