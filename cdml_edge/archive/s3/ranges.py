"""Byte-range bookkeeping for ``s3://`` sources: bytes held in memory, request grouping."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any


class Extents:
    """Sorted, merged ``(offset, bytes)`` chunks of the object held in memory."""

    def __init__(self, chunks: Sequence[tuple[int, bytes]] = ()) -> None:
        self._starts: list[int] = []
        self._data: list[bytes] = []
        for off, data in chunks:
            self.add(off, data)

    def chunks(self) -> list[tuple[int, bytes]]:
        """The ``(offset, bytes)`` chunks held, in offset order."""
        return list(zip(self._starts, self._data, strict=True))

    def nbytes(self) -> int:
        """Bytes held in all."""
        return sum(len(d) for d in self._data)

    def add(self, offset: int, data: bytes) -> None:
        """Hold ``data`` at ``offset``, merged with the chunks it touches (``data`` wins)."""
        if not data:
            return
        start, end = offset, offset + len(data)
        keep_s: list[int] = []
        keep_d: list[bytes] = []
        lo, hi = start, end
        pieces: list[tuple[int, bytes]] = [(start, data)]
        for s, d in zip(self._starts, self._data, strict=True):
            if s + len(d) < start or s > end:
                keep_s.append(s)
                keep_d.append(d)
            else:
                pieces.append((s, d))
                lo, hi = min(lo, s), max(hi, s + len(d))
        merged = bytearray(hi - lo)
        for s, d in sorted(pieces, key=lambda p: p[0]):
            merged[s - lo : s - lo + len(d)] = d
        merged[start - lo : end - lo] = data
        i = bisect.bisect_left(keep_s, lo)
        keep_s.insert(i, lo)
        keep_d.insert(i, bytes(merged))
        self._starts, self._data = keep_s, keep_d

    def covering(self, offset: int) -> tuple[int, bytes] | None:
        """The chunk holding byte ``offset``, if any."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and offset < self._starts[i] + len(self._data[i]):
            return self._starts[i], self._data[i]
        return None

    def get(self, offset: int, end: int) -> bytes | None:
        """Bytes ``[offset, end)`` if one chunk holds them all."""
        hit = self.covering(offset)
        if hit is None or end > hit[0] + len(hit[1]):
            return None
        s, d = hit
        return d[offset - s : end - s]

    def missing_span(self, offset: int, end: int) -> tuple[int, int]:
        """The smallest ``[a, b)`` inside ``[offset, end)`` holding every byte not in memory."""
        a = offset
        while a < end:
            hit = self.covering(a)
            if hit is None:
                break
            a = hit[0] + len(hit[1])
        b = end
        while b > a:
            hit = self.covering(b - 1)
            if hit is None:
                break
            b = hit[0]
        return a, max(a, b)


def content_range(resp: Any, nbody: int) -> tuple[int, int]:
    """``(object size, first byte offset)`` of a ranged ``GET`` answer."""
    cr = str(resp.get("ContentRange") or "")
    m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", cr)
    if m and m.group(3) != "*":
        return int(m.group(3)), int(m.group(1))
    return nbody, 0  # 200 without Content-Range: the whole object


def coalesce(
    ranges: Sequence[tuple[int, int, int]],
    gap: int,
    max_request: int,
    max_waste: int | None = None,
) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
    """Group ``(start, end, tag)`` ranges into ``(start, end, members)`` requests.

    Ranges are sorted by start; a range joins the current group when it begins at most
    ``gap`` bytes after the group's end and the group stays within ``max_request`` bytes
    (a single range longer than that is still one request). ``max_waste``: the gap bytes
    bridged in all, fetched and dropped; past it, ranges are requests of their own.
    """
    groups: list[tuple[int, int, list[tuple[int, int, int]]]] = []
    waste = 0
    for start, end, tag in sorted(ranges):
        if groups:
            g_start, g_end, members = groups[-1]
            bridged = max(0, start - g_end)
            fits = max_waste is None or waste + bridged <= max_waste
            if start - g_end <= gap and max(g_end, end) - g_start <= max_request and fits:
                members.append((start, end, tag))
                groups[-1] = (g_start, max(g_end, end), members)
                waste += bridged
                continue
        groups.append((start, end, [(start, end, tag)]))
    return groups
