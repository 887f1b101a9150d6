"""A CSV member with one huge line is refused within bounded memory (a decode bomb).

``csv`` refuses a field over its limit (131,072 characters), but before this the text was
handed to it through ``io.StringIO`` (four bytes a character), after the first line had been
copied and split or the rows re-encoded: a 64 MiB line grew the peak RSS by 384 MiB (six
times it), so the 1 GB line a member may hold (``max_member_bytes``) would take over 5 GB
to refuse. Each case runs in a fresh process, so its peak RSS is its own.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable

import pytest
from helpers.paths import ROOT

from cdml_edge.decode import DecodeError, decode

MIB = 1 << 20
LINE = 64 * MIB

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, tempfile, time
    from cdml_edge.decode import DecodeError, decode
    import cdml_edge.decode.tabular  # imports paid before measuring
    kind, n = sys.argv[1], int(sys.argv[2])
    head, fill, tail = {
        "first": (b"", b"x", b",1\\n1,2\\n"),
        "later": (b"a,b\\n1,2\\n", b"x", b",1\\n"),
        "quoted": (b'a,b\\n"', b"x", b'",1\\n'),
        "wide": (b"a,b\\n" + b"1,2\\n" * 1000, b"y", b"\\n"),
    }[kind]
    with tempfile.TemporaryFile() as f:  # written in pieces, read back in one allocation
        f.write(head)
        for _ in range(n >> 20):
            f.write(fill * (1 << 20))
        f.write(tail)
        f.seek(0)
        data = f.read()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu = time.process_time()
    try:
        decode(data, "line/huge.csv")
        error = None
    except DecodeError as exc:
        error = [exc.member, str(exc)]
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    print(json.dumps({"error": error, "grown": grown, "cpu": time.process_time() - cpu}))
    """
)


@pytest.mark.parametrize("kind", ["first", "later", "quoted", "wide"])
def test_a_csv_with_a_huge_line_is_refused_in_bounded_memory(kind: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(LINE)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's package
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["error"] is not None, f"{kind}: decoded"
    member, message = got["error"]
    assert member == "line/huge.csv" and "field larger than field limit" in message, got
    # the text itself (one byte a character) and one copy at most: never four times it
    assert got["grown"] < 2.3 * LINE, f"{kind}: refusing it grew the peak RSS by {got['grown']}"
    assert got["cpu"] < 10, got


@pytest.mark.parametrize(
    "text",
    [
        'a,b\n"x\ny",1\n"p\r\nq",2\n',  # newlines inside quoted fields are kept
        "a,b\r\n1,2\r\n3,4\r\n",  # CRLF
        "a,b\rc,d\r1,2\r",  # a lone CR ends a record, as csv reads it
        'a,b\n"x\x0cy",1\n"\x1c\x85",2\n',  # other breaks str.splitlines knows are data
        "t,v\n2024-01-01,1\n2024-01-02,2",  # no newline at the end
        'a,b\n"é\u2028ü",1\n',
        "",
        "\n\n",
        'a\n"' + "q" * 300_000 + "\n" + "r" * 300_000 + '",1\n',  # a long line in quotes
    ],
)
def test_csv_lines_give_the_records_string_io_gives(text: str) -> None:
    """``csv`` reads from :func:`_long_csv_lines` what it reads from ``StringIO``."""
    from cdml_edge.decode.tabular import _long_csv_lines

    def records(lines: Iterable[str]) -> list[list[str]] | str:
        csv.field_size_limit(1 << 20)
        try:
            return list(csv.reader(lines))
        except csv.Error as exc:
            return str(exc)
        finally:
            csv.field_size_limit(131072)

    assert records(_long_csv_lines(text, ",", "m.csv")) == records(io.StringIO(text))


def test_a_field_over_the_limit_is_refused_naming_the_member() -> None:
    with pytest.raises(DecodeError, match="field larger than field limit") as err:
        decode(b"a,b\n" + b"z" * 200_000 + b",1\n", "s/m.csv")
    assert err.value.member == "s/m.csv"


def test_a_large_numeric_csv_is_read_in_place_past_its_header() -> None:
    """Over 8 MiB, the rows after a header are read from one copy of the text, in place."""
    rows = 700_000
    data = b"a,b\n" + b"".join(b"%d,%d.5\n" % (i, i % 1000) for i in range(rows))
    assert len(data) > 8 << 20
    table = decode(data, "big.csv")
    assert table.columns == ["a", "b"] and table.values.shape == (rows, 2)
    assert table.values[-1].tolist() == [rows - 1, (rows - 1) % 1000 + 0.5]
    bare = decode(data[4:], "bare.csv")  # no header: the same text from its start
    assert bare.values.shape == (rows, 2) and not bare.has_header
