"""Arrow schemas of the fleet's rows (needs pyarrow, not Ray)."""

from __future__ import annotations

from typing import Any

from cdml_edge.retrain.fleet.rows import Columns


def arrow_schema(columns: Columns) -> Any:
    """The Arrow schema of ``columns``: ``(name, kind)`` pairs, kinds as pyarrow names them."""
    import pyarrow as pa

    types = {"string": pa.string(), "binary": pa.binary(), "float64": pa.float64()}
    types.update({"int64": pa.int64(), "bool": pa.bool_()})
    return pa.schema([(name, types[kind]) for name, kind in columns])


__all__ = ["arrow_schema"]
