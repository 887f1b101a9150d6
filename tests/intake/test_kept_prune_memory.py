"""The end of every full scan prunes the kept-file record: in bounded memory.

A keep folder holds what the user leaves there, a million files after a year of a camera's
stills. The prune read every row of the record into a list at once (some 250 bytes of
Python objects a row: a quarter of a GB for a million files, at every rescan, restart and
lost watch); it reads them in batches of ``PRUNE_BATCH`` now. Measured with tracemalloc on
a real record of real files.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from cdml_edge.intake.kept import PRUNE_BATCH, KeptFiles
from cdml_edge.window.items import FileIdentity

ROWS = 30_000


def test_a_prune_holds_a_batch_of_rows_not_the_record(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    real = folder / "kept.jpg"
    real.write_bytes(b"x")
    ident = FileIdentity.of(os.stat(real))
    record = KeptFiles(tmp_path / "kept.sqlite")
    rows = [
        (os.fsencode(f"{folder}/still-{i:08d}.jpg"), ident.dev, ident.ino + 1 + i, 1, 1)
        for i in range(ROWS)
    ]
    with record._lock:  # a record of ROWS files kept earlier (written as one transaction)
        record._conn.execute("BEGIN")
        record._conn.executemany("INSERT INTO kept VALUES (?, ?, ?, ?, ?)", rows)
        record._conn.execute("COMMIT")
        record._count = ROWS
    record.put(str(real), ident)
    for i in range(0, ROWS, 2):  # half of them still there, unchanged
        p = folder / f"still-{i:08d}.jpg"
        p.write_bytes(b"s")
        st = os.stat(p)
        record.put(str(p), FileIdentity.of(st))
    del rows
    tracemalloc.start()
    try:
        gone = record.prune()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert gone == ROWS // 2 and len(record) == ROWS // 2 + 1
    assert record.get(str(real)) == ident
    per_batch = 1000 * PRUNE_BATCH  # a kB a row held, generously
    assert peak < per_batch, f"peak {peak / 1e6:.1f} MB for a prune of {ROWS} rows"
    record.close()
