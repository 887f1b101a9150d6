"""A classifier whose logits hold ``inf`` gives a score that is not finite, without a warning.

The item is then refused as ``NonFiniteScore`` by the scoring (one error event); numpy's
``RuntimeWarning: invalid value encountered in subtract`` must not reach the journal or the
terminal of ``cdml-edge test`` on top of it.
"""

from __future__ import annotations

import warnings

import numpy as np

from cdml_edge.model.heads import softmax


def test_inf_logits_give_nan_rows_without_a_warning() -> None:
    logits = np.array([[np.inf, 1.0, 2.0], [-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = softmax(logits)
    assert np.isnan(p[0]).any() and np.isnan(p[1]).all()
    assert np.allclose(p[2], np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())


def test_huge_logits_do_not_overflow() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = softmax(np.array([[1e30, 0.0, -1e30]], dtype=np.float32))
    assert np.allclose(p, [[1.0, 0.0, 0.0]])
