"""The C helper that reads plain numeric CSV cells gives what ``csv`` and NumPy give, or nothing.

Every table is decoded twice, with the helper and without it (the long way), and compared
bit for bit: values, columns, header. Texts the helper must leave to the long way (quotes,
empty cells, spaces, ``nan``, underscores, digits past 2^53, powers beyond 1e22, a lone
carriage return, rows of another width) come out the same as well, and random bytes never
make it read or write outside its buffers.
"""

from __future__ import annotations

import csv
import random

import numpy as np
import pytest

from cdml_edge.decode import native, tabular
from cdml_edge.decode.errors import DecodeError
from cdml_edge.decode.tabular import CsvTable, decode_csv

pytestmark = pytest.mark.skipif(native.helpers() is None, reason="needs the decoders' C helpers")


def _long_way(data: bytes, monkeypatch: pytest.MonkeyPatch) -> CsvTable | str:
    with monkeypatch.context() as m:
        m.setattr(tabular, "helpers", lambda: None)
        return _decoded(data)


def _decoded(data: bytes) -> CsvTable | str:
    try:
        return decode_csv(data, member="t.csv")
    except DecodeError as exc:
        return str(exc)


def _same(data: bytes, monkeypatch: pytest.MonkeyPatch) -> CsvTable | str:
    fast, slow = _decoded(data), _long_way(data, monkeypatch)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow, data
        return fast
    assert (fast.columns, fast.has_header, fast.text_columns) == (
        slow.columns,
        slow.has_header,
        slow.text_columns,
    ), data
    assert fast.values.dtype == slow.values.dtype == np.float32, data
    assert fast.values.shape == slow.values.shape, data
    assert fast.values.tobytes() == slow.values.tobytes(), data  # -0.0 and all
    return fast


def test_a_plain_sensor_csv_is_read_by_the_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    rows = "\n".join(",".join(f"{v:.5f}" for v in r) for r in rng.normal(size=(256, 3)))
    data = f"ax,ay,az\n{rows}\n".encode()
    text = data.decode()
    assert tabular._plain_numbers(text, ",") is not None  # not the long way
    table = _same(data, monkeypatch)
    assert isinstance(table, CsvTable) and table.values.shape == (256, 3)


NUMBERS = [
    "0", "-0", "+0", "1.", ".5", "-.5", "+1", "00012", "1e5", "1E-5", "1e+5", "-1.25e-3",
    "123456.789", "0.1", "0.30000000000000004", "9007199254740992", "9007199254740993",
    "0.12345678901234567890", "1e22", "1e23", "1e-22", "1e-23", "4.5e-300", "0e999",
    "1.7976931348623157e308", "3.4028235e38", "3.4028236e38", "1e39", "1.0000000596046448",
    "16777217", "0.000001", "1" + "0" * 20, "0." + "0" * 30 + "1",
]  # fmt: skip
NOT_PLAIN = [
    "", " 1", "1 ", "1_0", "nan", "inf", "-inf", "0x10", "1e", "e5", ".", "-", "+", "1..2",
    "1e5.5", "--1", "1,5", "١", "1\x00", "1d5",
]  # fmt: skip


@pytest.mark.parametrize("cell", NUMBERS + NOT_PLAIN)
def test_each_kind_of_cell_reads_as_the_long_way_reads_it(
    cell: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for text in (f"a;b\n{cell};2\n3;{cell}\n", f"7;{cell}\r\n{cell};8\r\n", f"{cell};1\n"):
        _same(text.encode(), monkeypatch)


@pytest.mark.parametrize(
    "text",
    [
        "a,b\n1,2\n\n3,4\n",  # an empty line is skipped
        "a,b\r\n1,2\r\n3,4",  # CRLF, no last line end
        "a,b\n1,2\r3,4\n",  # a lone CR ends a line for csv
        "a,b\n1,2,3\n",  # a row of another width
        "a,b\n1\n",
        "\na,b\n1,2\n",  # an empty first line
        "1,2\n",  # one line, no header
        "a,b\n",  # a header alone
        "a,b\n1,2\r\r\n",
        '"a",b\n1,2\n',  # quoted
        "a,b\n1,\n",  # an empty cell: NaN
        "a\tb\n1\t2\n",
        "a|b\n1|2\n",
        "x,y\n" + "1," * 0 + "1,2\n" * 5000,
        ",\n1,2\n",  # a header of empty names
        "1,2\n3,4\n5,6\n",
        "a,b\n1," + "0" * 200_000 + "1\n",  # a field past csv's own limit
        "a,b\n" + "\n" * 1000 + "1,2\n",
    ],
)
def test_line_ends_widths_and_quotes_come_out_as_the_long_way(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _same(text.encode(), monkeypatch)


def test_a_header_cell_past_csvs_field_limit_is_refused_as_the_long_way_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = csv.field_size_limit()
    for name in ("a" * limit, "a" * (limit + 1)):
        _same(f"{name},b\n1,2\n".encode(), monkeypatch)


def test_generated_tables_come_out_as_the_long_way(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(11)
    cells = NUMBERS + NOT_PLAIN[:4] + [f"{rnd.uniform(-1e4, 1e4):.{rnd.randrange(9)}f}"]
    for _ in range(400):
        width = rnd.randrange(1, 6)
        delim = rnd.choice(",;\t|")
        end = rnd.choice(["\n", "\r\n"])
        lines = [delim.join(f"c{i}" for i in range(width))] if rnd.random() < 0.7 else []
        for _ in range(rnd.randrange(1, 12)):
            row = [rnd.choice(cells) if rnd.random() < 0.3 else f"{rnd.gauss(0, 50):.4f}"]
            row += [f"{rnd.gauss(0, 50):.{rnd.randrange(7)}e}" for _ in range(width - 1)]
            lines.append(delim.join(row))
        _same((end.join(lines) + end * rnd.randrange(2)).encode(), monkeypatch)


def test_random_bytes_never_take_the_helper_outside_its_buffers() -> None:
    """Straight at the helper: rows within ``cap``, nothing written past them."""
    ffi, lib = native.helpers()  # type: ignore[misc]
    rnd = random.Random(5)
    alphabet = b"0123456789.,;eE+-\r\n\t |x"
    for i in range(3000):
        n = rnd.randrange(0, 200)
        raw = bytes(rnd.choice(alphabet) for _ in range(n)) if i % 2 else rnd.randbytes(n)
        width, cap = rnd.randrange(1, 5), rnd.randrange(0, 6)
        out = np.full((cap + 1) * width, 7.0, np.float32)  # one guard row
        rows = lib.cdml_csv_numbers(raw, n, b",", width, ffi.from_buffer("float[]", out), cap)
        assert -1 <= rows <= cap
        assert (out[cap * width :] == 7.0).all(), raw
