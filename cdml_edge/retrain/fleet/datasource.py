"""A Ray Data datasource over retained windows: one read task per group of windows.

:class:`WindowDatasource` takes the listing of a fleet (:func:`~.locations.list_windows`)
and a row builder (:mod:`~.rows`); each read task walks a run of consecutive windows of
about ``task_bytes`` archive bytes and yields Arrow blocks of at most ``block_bytes``.
Imports Ray: only loaded when the ``ray`` extra is installed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

from cdml_edge.retrain.fleet.arrow import arrow_schema
from cdml_edge.retrain.fleet.locations import WindowRef, group_windows, weight
from cdml_edge.retrain.fleet.rows import Row

DEFAULT_TASK_BYTES = 256 << 20  # archive bytes one read task reads at most (about)
DEFAULT_BLOCK_BYTES = 64 << 20  # a block is yielded once it holds this much


class WindowDatasource(Datasource):
    """Rows built by ``builder`` (``rows(ref) -> list[dict]``, ``columns``) for each window."""

    def __init__(
        self,
        refs: Sequence[WindowRef],
        builder: Any,
        *,
        task_bytes: int = DEFAULT_TASK_BYTES,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        name: str = "RetainedWindows",
    ) -> None:
        super().__init__()
        self.refs = list(refs)
        self.builder = builder
        self.task_bytes = task_bytes
        self.block_bytes = block_bytes
        self._name = name

    def get_name(self) -> str:
        """The name Ray shows for the read (``name``)."""
        return self._name

    def estimate_inmemory_data_size(self) -> int | None:
        """The archive and sidecar bytes of every window: Ray's size estimate."""
        return sum(weight(r) for r in self.refs)

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[ReadTask]:
        """Read tasks over groups of consecutive windows.

        At least ``parallelism`` tasks when there are that many windows, and enough that none
        reads much more than ``task_bytes``.
        """
        total = sum(weight(r) for r in self.refs)
        n = max(parallelism, math.ceil(total / max(1, self.task_bytes)))
        schema = arrow_schema(self.builder.columns)
        tasks = []
        for group in group_windows(self.refs, n, weight):
            meta = BlockMetadata(
                num_rows=None,
                size_bytes=sum(weight(r) for r in group),
                input_files=None,
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    _reader(self.builder, group, schema, self.block_bytes),
                    meta,
                    schema=schema,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks


def _reader(builder: Any, group: list[WindowRef], schema: pa.Schema, block_bytes: int) -> Any:
    return lambda: read_blocks(builder, group, schema, block_bytes)


def read_blocks(
    builder: Any, group: Sequence[WindowRef], schema: pa.Schema, block_bytes: int
) -> Iterator[pa.Table]:
    """The rows of ``group``'s windows as Arrow tables of about ``block_bytes`` each."""
    rows: list[Row] = []
    held, blocks = 0, 0
    for ref in group:
        for row in builder.rows(ref):
            rows.append(row)
            held += sum(len(v) for v in row.values() if isinstance(v, bytes))
        if held >= block_bytes:
            yield pa.Table.from_pylist(rows, schema=schema)
            rows, held, blocks = [], 0, blocks + 1
    if rows or not blocks:
        yield pa.Table.from_pylist(rows, schema=schema)


__all__ = [
    "DEFAULT_TASK_BYTES",
    "WindowDatasource",
    "arrow_schema",
    "read_blocks",
]
