"""A ``recursive`` folder source in its own process: what it takes and reports, as JSON lines.

``python subfolder_watch.py FOLDER OUT.jsonl inotify|polling``: run (unprivileged, see
:mod:`unprivileged`) by ``test_unreadable_subfolder``; each item taken, each event of the
error sink and each change of :attr:`FolderSource.degraded` is one line; SIGTERM stops it.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from cdml_edge.intake import FolderSource, FolderSpec
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.window.items import Item


def main() -> int:
    folder, out, watch = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    lock = threading.Lock()
    stream = out.open("a", buffering=1, encoding="utf-8")

    def emit(**rec: Any) -> None:
        with lock:
            stream.write(json.dumps(rec) + "\n")

    def item(it: Item) -> None:
        emit(kind="item", name=it.name, data=it.data.decode())

    def event(source: str, name: str | None, exc: Exception, path: Path | None) -> None:
        emit(kind="event", type=type(exc).__name__, item=name, message=str(exc))

    spec = FolderSpec(
        name="tree",
        path=folder,
        modality="text",
        patterns=("*.txt",),
        recursive=True,
        polling=watch == "polling",
        poll_interval=0.1,
        stable_seconds=0.2,
    )
    src = FolderSource(spec, ByteBudget(10**8), item, event)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    src.start()
    emit(kind="started")
    last: str | None = None
    while not stop.wait(0.05):
        if src.degraded != last:
            last = src.degraded
            emit(kind="degraded", why=last)
    src.stop()
    emit(kind="stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
