"""The retention store: scored windows kept on disk for replay and training export.

* :mod:`~cdml_edge.store.retention` — :class:`RetentionRing`, the bounded ring the agent
  stores windows in (keep policy, byte and age bounds, disk-full handling, recovery);
* :mod:`~cdml_edge.store.sidecar` — the ``.window.json`` sidecar next to each archive,
  reading it, and :func:`list_retained` (read-only, safe beside a live agent);
* :mod:`~cdml_edge.store.catalog` — the SQLite index of the sidecars (a cache, rebuildable);
* :mod:`~cdml_edge.store.policy` — what is kept and what is evicted first;
* :mod:`~cdml_edge.store.repair` — damaged sidecars rebuilt, or moved to ``corrupt/``;
* :mod:`~cdml_edge.store.files` — temporary names, renames and fsyncs of the ring's writes.
"""

from cdml_edge.store.catalog import Catalog, WindowRecord
from cdml_edge.store.retention import RetentionRing, StoreResult, StoreStatus
from cdml_edge.store.sidecar import RetainedWindow, RetentionError, list_retained, read_sidecar

__all__ = [
    "Catalog",
    "RetainedWindow",
    "RetentionError",
    "RetentionRing",
    "StoreResult",
    "StoreStatus",
    "WindowRecord",
    "list_retained",
    "read_sidecar",
]
