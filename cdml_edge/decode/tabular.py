"""CSV, time-series arrays, JSON and text."""

from __future__ import annotations

import csv
import io
import json
import math
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from .errors import DecodeError
from .isolation import run_decode
from .limits import DecodeLimits, charged, current_limits
from .native import helpers

_DELIMITERS = ",;\t|"


@dataclass(frozen=True)
class CsvTable:
    """Numeric columns of a CSV as float32 ``(rows, columns)``; text columns kept apart."""

    values: np.ndarray
    columns: list[str]
    has_header: bool
    text_columns: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class TextData:
    """A decoded text document."""

    text: str
    lines: list[str]
    word_count: int


def _to_str(data: bytes | bytearray | memoryview, member: str, encoding: str) -> str:
    try:
        return bytes(data).decode(encoding)
    except UnicodeDecodeError as exc:
        raise DecodeError(member, f"not valid {encoding} text: {exc}") from exc


def _number(cell: str) -> float | None:
    s = cell.strip()
    if not s:
        return math.nan
    try:
        return float(s)
    except ValueError:
        return None


def _delimiter(text: str, name: str) -> str:
    if name.lower().endswith(".tsv"):
        return "\t"
    sample = text[:8192]
    truncated = len(text) > len(sample)
    plain = _plain_delimiter(sample, truncated)
    if plain is not None:
        return plain
    if '"' in sample or "'" in sample:
        return _quoted_delimiter(sample, truncated)
    try:  # its frequency table: linear; its quote patterns are not, and quotes go above
        return csv.Sniffer().sniff(sample, delimiters=_DELIMITERS).delimiter
    except csv.Error:
        return ","


def _quoted_delimiter(sample: str, truncated: bool, rows: int = 10) -> str:
    """The delimiter of a CSV with quotes, without the sniffer (cubic on some quotes).

    Each candidate splits the first ``rows`` records (parsed by ``csv``, linear); it fits
    when most of them share one width above one. Of those that fit, the one whose width the
    most records share, then the one found most often beside a quote (the sniffer's first
    clue), then the first in the order of ``_DELIMITERS``; ``","`` when none fits.
    """
    fitting: list[tuple[int, int, int, str]] = []
    for rank, d in enumerate(_DELIMITERS):
        records = _first_records(sample, d, rows + 1)
        if (truncated or len(records) > rows) and len(records) > 1:
            records = records[:-1]  # the last one may be cut (unless it is all there is)
        widths = [len(r) for r in records if r]
        if not widths:
            continue
        width = max(set(widths), key=widths.count)
        share = widths.count(width)
        if width > 1 and 2 * share > len(widths):
            beside = sum(sample.count(q + d) + sample.count(d + q) for q in "\"'")
            fitting.append((-share, -beside, rank, d))
    return min(fitting)[3] if fitting else ","


def _first_records(sample: str, delimiter: str, limit: int) -> list[list[str]]:
    """Up to ``limit`` records of ``sample`` as ``csv`` reads them; those before an error."""
    out: list[list[str]] = []
    reader = csv.reader(io.StringIO(sample), delimiter=delimiter)
    try:
        for record in reader:
            out.append(record)
            if len(out) >= limit:
                break
    except csv.Error:  # a field cut by the sample's end, a NUL: what was read is enough
        pass
    return out


def _plain_delimiter(sample: str, truncated: bool, lines: int = 10) -> str | None:
    """The delimiter of a plain CSV without the sniffer (a few ms per file).

    The one candidate that every one of the first ``lines`` lines holds equally often, when
    nothing is quoted; ``None`` (ask the sniffer) otherwise.
    """
    if '"' in sample or "'" in sample:
        return None
    head = sample.splitlines()
    if truncated:
        head = head[:-1]  # the last line of the sample may be cut
    head = [ln for ln in head[:lines] if ln]
    if not head:
        return None
    found = []
    for d in _DELIMITERS:
        counts = {ln.count(d) for ln in head}
        if len(counts) == 1 and 0 not in counts:
            found.append(d)
    return found[0] if len(found) == 1 else None


PARSED_CELL_BYTES = 64
"""What one parsed cell, JSON value or word costs in Python objects (its ``str`` or ``int``
and the list slot holding it): the bytes charged to ``max_decoded_bytes`` per cell."""


def check_cells(text: str, member: str, what: str, separators: str, lim: DecodeLimits) -> int:
    """Refuse a text whose cells (counted as ``separators`` + 1) are over ``lim``.

    Counting is a pass of ``str.count`` per separator: an upper bound (a quoted separator
    counts too), taken before anything is parsed. Returns the bytes parsing will take.
    """
    cells = 1 + sum(text.count(sep) for sep in separators)
    lim.check_cells(member, what, cells)
    cost = cells * PARSED_CELL_BYTES
    lim.check_bytes(member, f"parsing {cells} {what} cells", cost)
    return cost


def decode_csv(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    encoding: str = "utf-8-sig",
    limits: DecodeLimits | None = None,
) -> CsvTable:
    """Parse a CSV (or TSV): numeric columns to float32, a header row detected.

    The first row is a header when any of its cells is not a number. Empty cells are NaN.
    A column whose every value is text (timestamps, tags) goes to ``text_columns``; a
    column mixing numbers and text, or rows of different widths, raise ``DecodeError``.
    Its cells are counted against ``limits`` before it is parsed (:func:`check_cells`).
    """
    text = _to_str(data, member, encoding)
    delimiter = _delimiter(text, member)
    lim = limits or current_limits()
    cost = check_cells(text, member, "CSV", delimiter + "\n", lim)
    with charged(cost):
        return run_decode(
            _parse_csv, (text, delimiter, member), member=member, limits=lim, cost=cost
        )


def _parse_csv(text: str, delimiter: str, member: str) -> CsvTable:
    """The table of a CSV's text (see :func:`decode_csv`)."""
    plain = _plain_numbers(text, delimiter)
    if plain is not None:
        return plain
    try:
        lines = _csv_lines(text, delimiter, member)
        rows = [r for r in csv.reader(lines, delimiter=delimiter) if r]
    except csv.Error as exc:
        raise DecodeError(member, f"malformed CSV: {exc}") from exc
    except MemoryError as exc:
        raise DecodeError(member, "out of memory parsing the CSV") from exc
    if not rows:
        raise DecodeError(member, "empty CSV")
    width = len(rows[0])
    columns, has_header = _columns(rows[0])
    body = rows[1:] if has_header else rows
    for line, row in enumerate(body, start=2 if has_header else 1):
        if len(row) != width:
            raise DecodeError(member, f"row {line} has {len(row)} fields, expected {width}")
    values = _all_numbers(body, member)
    if values is not None:
        return CsvTable(values, columns, has_header)
    return _mixed_table(body, columns, has_header, member)


_STRINGIO_TEXT = 8 << 20
"""Texts of up to this many characters reach ``csv`` through ``io.StringIO`` (32 MiB)."""


def _csv_lines(text: str, delimiter: str, member: str) -> Iterator[str]:
    """The lines of ``text`` for ``csv``: ``io.StringIO``'s, or :func:`_long_csv_lines`.

    ``StringIO`` holds four bytes a character: texts over :data:`_STRINGIO_TEXT` are split
    by :func:`_long_csv_lines` instead, into the same lines, one at a time.
    """
    if len(text) <= _STRINGIO_TEXT:
        return io.StringIO(text)
    return _long_csv_lines(text, delimiter, member)


def _long_csv_lines(text: str, delimiter: str, member: str) -> Iterator[str]:
    """The lines ``io.StringIO(text)`` gives, one at a time, without a copy of the text.

    Split at line feeds only, each line with its end, as ``StringIO`` splits. A line too
    long for ``csv`` to read (longer than its fields can be, each at most
    ``csv.field_size_limit()`` characters: quoted, twice that and its quotes) is refused
    before it is cut out of the text, with the error ``csv`` would have raised on it.
    """
    limit = csv.field_size_limit()
    longest = 2 * limit + 4  # one quoted field at its limit, a separator and a line end
    pos, size = 0, len(text)
    while pos < size:
        end = text.find("\n", pos) + 1 or size
        if end - pos > longest and end - pos > (text.count(delimiter, pos, end) + 1) * longest:
            raise DecodeError(member, f"malformed CSV: field larger than field limit ({limit})")
        yield text[pos:end]
        pos = end


def _plain_numbers(text: str, delimiter: str) -> CsvTable | None:
    """The table of a plain numeric CSV, its cells read by the decoders' C helper.

    ``None`` for the long way (``csv`` and NumPy, the same values where this gives any):
    without the helpers, for text that is not ASCII or quotes anything, a first line that
    is empty, the only one or has a cell past ``csv``'s field limit, and wherever the
    helper meets anything but plain decimal numbers in rows of the first line's width (see
    ``decode/_native/csvnum.h``). A 256 x 3 sensor CSV: the numbers in about 15 µs instead
    of 230 (Python's ``float`` costs about 170 ns a cell on a small core).
    """
    native = helpers()
    if native is None or delimiter not in _DELIMITERS or '"' in text or not text.isascii():
        return None
    first = text.find("\n")
    limit = csv.field_size_limit()
    if first > limit and first > (text.count(delimiter, 0, first) + 1) * (limit + 1):
        return None  # a cell past csv's limit, found without a copy of the line
    head = text[: max(first, 0)].removesuffix("\r")
    if not head or "\r" in head:
        return None
    cells = head.split(delimiter)
    if max(map(len, cells)) > csv.field_size_limit():  # refused by csv: its error, the long way
        return None
    columns, has_header = _columns(cells)
    ffi, lib = native
    start = first + 1 if has_header else 0
    size = len(text) - start
    if start and len(text) > _STRINGIO_TEXT:  # one copy of a large text, read past its header
        whole = text.encode("ascii")
        raw = ffi.from_buffer(whole) + start  # ``whole`` is held for the call
        lines = whole.count(b"\n", start) + 1
    else:
        raw = (text[start:] if start else text).encode("ascii")
        lines = raw.count(b"\n") + 1
    width = len(cells)
    # each row takes at least 2 * width - 1 characters and a line end: no room beyond that
    cap = min(lines, (size + 1) // (2 * width) + 1)
    values = np.empty((cap, width), np.float32)
    out = ffi.from_buffer(values, require_writable=True)  # held for the call
    rows = lib.cdml_csv_numbers(raw, size, delimiter.encode(), width, ffi.cast("float *", out), cap)
    if rows <= 0:
        return None
    return CsvTable(values[:rows], columns, has_header)


def _columns(first_row: list[str]) -> tuple[list[str], bool]:
    """The column names and whether ``first_row`` is a header (any cell not a number)."""
    if any(_number(c) is None for c in first_row):
        return [c.strip() or f"col{i}" for i, c in enumerate(first_row)], True
    return [f"col{i}" for i in range(len(first_row))], False


def _all_numbers(body: list[list[str]], member: str) -> np.ndarray | None:
    """The body as float32 when every cell is a number (NumPy parses text as ``float()`` does).

    ``None`` when a cell is empty or text, for :func:`_mixed_table` to sort out.
    """
    if not body:
        return None
    try:
        return np.array(body, dtype=np.float64).astype(np.float32)
    except (ValueError, TypeError):
        return None
    except MemoryError as exc:
        raise DecodeError(member, "out of memory building the CSV array") from exc


def _mixed_table(
    body: list[list[str]], columns: list[str], has_header: bool, member: str
) -> CsvTable:
    """Cell by cell: empty cells are NaN, all-text columns are kept apart.

    A column mixing numbers and text raises.
    """
    numeric: list[int] = []
    text_cols: dict[str, list[str]] = {}
    parsed = [[_number(c) for c in row] for row in body]
    for j, name in enumerate(columns):
        kinds = {v is None for row in parsed if not _is_nan(v := row[j])}
        if kinds == {True}:
            text_cols[name] = [row[j] for row in body]
        elif kinds == {True, False}:
            bad = next(i for i, row in enumerate(parsed) if row[j] is None)
            raise DecodeError(
                member, f"column {name!r} mixes numbers and text (row {bad + 1 + has_header})"
            )
        else:
            numeric.append(j)
    try:
        values = np.array([[row[j] for j in numeric] for row in parsed], dtype=np.float32).reshape(
            len(parsed), len(numeric)
        )
    except MemoryError as exc:
        raise DecodeError(member, "out of memory building the CSV array") from exc
    return CsvTable(values, [columns[j] for j in numeric], has_header, text_cols)


def _is_nan(v: float | None) -> bool:
    return v is not None and math.isnan(v)


def decode_timeseries(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    key: str | None = None,
    limits: DecodeLimits | None = None,
) -> np.ndarray:
    """A float32 array ``(steps, channels)`` from ``.npy`` / ``.npz`` or a numeric CSV.

    From ``.npz``, the first array or ``key``; 1-D series become one channel. The array's
    ``.npy`` header (its shape and dtype) is checked against ``limits`` before it is read:
    its cells and its decompressed bytes.
    """
    buf = bytes(data)
    lim = limits or current_limits()
    if buf.startswith(b"\x93NUMPY") or buf.startswith(b"PK\x03\x04"):
        try:
            out = np.asarray(_load_array(buf, member, key, lim), dtype=np.float32)
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(member, f"not a numeric NumPy array: {exc}") from exc
    else:
        out = decode_csv(buf, member=member, limits=lim).values
    if out.ndim == 1:
        out = out[:, None]
    if out.ndim != 2:
        raise DecodeError(member, f"time series must be 1-D or 2-D, got shape {out.shape}")
    return np.ascontiguousarray(out)


def _load_array(buf: bytes, member: str, key: str | None, lim: DecodeLimits) -> np.ndarray:
    """The array of a ``.npy``, or of one ``.npz`` entry, its header checked first."""
    if buf.startswith(b"\x93NUMPY"):
        with charged(check_npy(io.BytesIO(buf), member, lim)):
            return np.asarray(np.load(io.BytesIO(buf), allow_pickle=False), dtype=np.float32)
    with zipfile.ZipFile(io.BytesIO(buf)) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        if not names:
            raise DecodeError(member, "empty .npz")
        name = names[0] if key is None else (f"{key}.npy" if f"{key}.npy" in names else key)
        with zf.open(name) as f:
            cost = check_npy(f, member, lim, f"entry {name}: ")
    with charged(cost), np.load(io.BytesIO(buf), allow_pickle=False) as npz:
        return np.asarray(npz[name.removesuffix(".npy")], dtype=np.float32)


def check_npy(f: IO[bytes], member: str, lim: DecodeLimits, where: str = "") -> int:
    """Refuse a ``.npy`` whose header claims more cells or bytes than ``lim`` allow.

    Returns the bytes loading it as float32 takes.
    """
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise DecodeError(member, f".npy format version {version} is not read")
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, _fortran, dtype = read(f)
    cells = math.prod(shape)
    lim.check_cells(member, f"{where}array of shape {shape}", cells)
    cost = cells * (dtype.itemsize + 4)
    lim.check_bytes(member, f"{where}array of shape {shape} as {dtype} and float32", cost)
    return cost


def decode_json(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    encoding: str = "utf-8-sig",
    limits: DecodeLimits | None = None,
) -> Any:
    """Parse JSON; ``.jsonl`` / ``.ndjson`` members give a list of one value per line.

    Its values (commas, brackets, braces and lines) are counted against ``limits`` first.
    """
    text = _to_str(data, member, encoding)
    lim = limits or current_limits()
    cost = check_cells(text, member, "JSON", ",[{\n", lim)
    with charged(cost):
        return run_decode(_parse_json, (text, member), member=member, limits=lim, cost=cost)


def _parse_json(text: str, member: str) -> Any:
    try:
        if member.lower().endswith((".jsonl", ".ndjson")):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DecodeError(member, f"malformed JSON: {exc}") from exc
    except RecursionError as exc:
        raise DecodeError(member, "JSON nested too deeply to parse") from exc
    except (MemoryError, ValueError) as exc:  # ValueError: e.g. an integer of too many digits
        raise DecodeError(member, f"JSON could not be parsed: {exc!r}") from exc


def decode_text(
    data: bytes | bytearray | memoryview,
    *,
    member: str = "",
    encoding: str = "utf-8-sig",
    limits: DecodeLimits | None = None,
) -> TextData:
    """Decode text: the string, its lines and its word count.

    Its words and lines (spaces, tabs and newlines) are counted against ``limits`` first.
    """
    text = _to_str(data, member, encoding)
    cost = check_cells(text, member, "text", " \t\n", limits or current_limits())
    with charged(cost):
        return TextData(text=text, lines=text.splitlines(), word_count=len(text.split()))
