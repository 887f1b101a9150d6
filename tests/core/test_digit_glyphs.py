"""The digit glyphs the demo, the benchmarks and the tests draw: the same without scikit-learn.

The appliance (``make demo``) installs no scikit-learn; the digits model was trained on
scikit-learn's bundled digits, and frames drawn from other glyphs were read right 17 times
in 40. The glyphs ship with the package.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from cdml_edge import synth


def test_the_shipped_glyphs_are_scikit_learns_digits() -> None:
    from sklearn.datasets import load_digits

    data = load_digits()
    glyphs, labels, source = synth.load_digit_glyphs()
    assert source == "sklearn-digits"
    assert np.array_equal(glyphs, (data.images.astype(np.float32) / 16.0).clip(0.0, 1.0))
    assert np.array_equal(labels, data.target)


def test_without_scikit_learn_the_glyphs_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    with_sklearn = synth.load_digit_glyphs()
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn fails
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    without = synth.load_digit_glyphs()
    assert without[2] == with_sklearn[2]
    assert np.array_equal(without[0], with_sklearn[0])
    assert np.array_equal(without[1], with_sklearn[1])
