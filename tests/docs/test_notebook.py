"""``notebooks/quickstart.ipynb`` runs top to bottom (nbclient, a real Jupyter kernel).

It says what it promises: trained, exported, live batches scored, the ring replayed alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.paths import ROOT

NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"


def test_notebook_is_stored_without_outputs() -> None:
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.mark.slow
def test_quickstart_runs_top_to_bottom(tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    last = nb.cells[-1].outputs
    text = "".join(o.get("text", "") for o in last if o.output_type == "stream")
    summary = json.loads(text.strip().splitlines()[-1])
    assert summary["trained_epochs"] == 5
    assert summary["live_files"] == summary["replayed_items"] == 40
    assert summary["replayed_windows"] >= 2  # files dropped in bursts: several batches
    assert summary["live_accuracy"] >= 0.8
    assert summary["replay_accuracy"] == summary["live_accuracy"]  # same model, same bytes
    assert (tmp_path / "digits.onnx").stat().st_size > 100_000
    assert list((tmp_path / "live_input").iterdir()) == []  # auto_delete after scoring
