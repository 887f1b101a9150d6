"""CSV decoding's two shortcuts for plain numeric files must give exactly what the long way does.

The shortcuts: the delimiter without the sniffer, the numbers without a per-cell loop.
"""

from __future__ import annotations

import contextlib
import csv
import io
import subprocess
import sys

import numpy as np

from cdml_edge import synth
from cdml_edge.decode.tabular import (
    _DELIMITERS,
    _delimiter,
    _mixed_table,
    _plain_delimiter,
    decode_csv,
)


def _sniffed(text: str) -> str:
    return csv.Sniffer().sniff(text[:8192], delimiters=_DELIMITERS).delimiter


def _decodes_as_the_cell_by_cell_parse(
    delim: str, width: int, rows: list[list[str]], header: bool
) -> None:
    lines = [delim.join(r[:width]) for r in rows]
    if header:
        lines.insert(0, delim.join(f"c{i}" for i in range(width)))
    text = "\n".join(lines) + "\n"
    assert _plain_delimiter(text, truncated=False) in (delim, None)
    if _plain_delimiter(text, truncated=False) is not None:
        assert _sniffed(text) == delim  # the sniffer agrees wherever the shortcut answers
    table = decode_csv(text.encode())
    body = [r[:width] for r in rows]
    slow = _mixed_table(body, table.columns, table.has_header, "")
    assert table.columns == slow.columns and table.text_columns == slow.text_columns == {}
    assert table.values.dtype == np.float32 and table.values.shape == slow.values.shape
    np.testing.assert_array_equal(table.values, slow.values)


def test_numeric_csv_decodes_as_the_cell_by_cell_parse() -> None:
    # hypothesis is imported by the test, not when the tests are collected
    from hypothesis import given, settings
    from hypothesis import strategies as st

    cell = st.one_of(
        st.floats(allow_nan=False, width=32).map(repr),
        st.integers(-(10**6), 10**6).map(str),
        st.sampled_from(["nan", " 1.5 ", "-0", "1e5", ".5", "inf"]),
    )
    check = settings(max_examples=150, deadline=None)(
        given(
            st.sampled_from(list(_DELIMITERS)),
            st.integers(2, 6),
            st.lists(st.lists(cell, min_size=6, max_size=6), min_size=1, max_size=30),
            st.booleans(),
        )(_decodes_as_the_cell_by_cell_parse)
    )
    check()


def test_the_shortcut_leaves_doubtful_files_to_the_sniffer() -> None:
    assert _plain_delimiter('a,b\n"1,5",2\n', truncated=False) is None  # quoted
    assert _plain_delimiter("1,5;2,5\n3,5;4,5\n", truncated=False) is None  # two candidates
    assert _plain_delimiter("1,2\n3\n", truncated=False) is None  # not on every line
    assert _plain_delimiter("just one column\n", truncated=False) is None
    assert _plain_delimiter("a|b\n1|2\n3|4", truncated=True) == "|"  # a cut last line ignored


def test_vibration_csv_is_plain_and_empty_cells_still_take_the_long_way() -> None:
    data = synth.vibration_csv(1, seed=5)[0]
    text = data.decode()
    assert _plain_delimiter(text[:8192], truncated=len(text) > 8192) == ","
    table = decode_csv(data)
    assert table.has_header and table.columns == ["ax", "ay", "az"]
    assert table.values.shape == (256, 3)
    rows = list(csv.reader(io.StringIO(text)))[1:]
    np.testing.assert_array_equal(table.values, np.array(rows, dtype=np.float32))
    gaps = decode_csv(b"a,b\n1,\n,2\n")
    assert np.isnan(gaps.values[0, 1]) and np.isnan(gaps.values[1, 0])


def test_a_quoted_csv_built_to_stall_the_sniffer_decodes_at_once() -> None:
    """A file of quotes that Python's ``csv.Sniffer`` takes cubic time on.

    307 bytes cost it 23 s of CPU, 3 KB hours, with the interpreter lock held (the whole
    agent stopped, SIGTERM too). In a child process: a stalled regular expression holds the
    lock, so no thread of this process could even notice.
    """
    code = (
        "from cdml_edge.decode import DecodeError\n"
        "from cdml_edge.decode.tabular import decode_csv\n"
        "try:\n"
        "    decode_csv(b',\"a\",\\n' + b'\"' * 3000 + b'a', member='x.csv')\n"
        "except DecodeError:\n"
        "    pass\n"
        "print('done')\n"
    )
    try:
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("decode_csv still running after 120 s") from None
    assert res.returncode == 0 and res.stdout.strip() == "done", res.stderr


def _quoted(delim: str, rng: np.random.Generator, rows: int) -> str:
    words = ["a", "b c", "x,y", "p;q", "1.5", "2", "t|u", "v\tw", 'say "hi"', ""]
    out = []
    for _ in range(rows):
        cells = []
        for _ in range(4):
            w = words[int(rng.integers(len(words)))]
            must = any(c in w for c in (delim, '"', "\n"))
            cells.append('"' + w.replace('"', '""') + '"' if must or rng.random() < 0.7 else w)
        out.append(delim.join(cells))
    return "\n".join(out) + "\n"


def test_quoted_csvs_get_the_delimiter_the_sniffer_gave() -> None:
    rng = np.random.default_rng(7)
    agreed = 0
    for _ in range(300):
        delim = _DELIMITERS[int(rng.integers(len(_DELIMITERS)))]
        text = _quoted(delim, rng, int(rng.integers(2, 12)))
        if '"' not in text:
            continue
        ours = _delimiter(text, "x.csv")
        assert ours == delim, (text, ours)
        with contextlib.suppress(csv.Error):
            agreed += _sniffed(text) == delim
    assert agreed > 200  # where the sniffer answers, it answers the same


def test_a_quoted_header_wider_than_the_sample_keeps_its_delimiter() -> None:
    """The cut first record was dropped, nothing was left, and "," was guessed."""
    for delim in ";\t|":
        header = delim.join(f'"sensor_{i:04d}"' for i in range(700))  # 9,799 characters
        rows = "\n".join(
            delim.join(f"{(r * i) % 97 / 10:.1f}" for i in range(700)) for r in range(3)
        )
        table = decode_csv((header + "\n" + rows + "\n").encode(), member="w.csv")
        assert table.values.shape == (3, 700), delim
