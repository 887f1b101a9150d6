"""The bound of a walk or copy over a whole compressed tar stream (a decompression bomb).

A tar.zst without a seek table is walked once at open, member data included: zstd cannot
seek inside a frame, so every byte is decoded, and 4-byte RLE blocks make 32,768 bytes of
each. Each member read is held to ``max_member_bytes`` and ``max_ratio``; the walk is held
to the same ratio over the whole stream, past ``max_member_bytes`` of it. No archive of real
data shrinks 1,100 times as a whole; one of mostly zeros is opened with a higher
``max_ratio``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdml_edge.archive.errors import StreamTooLargeError

if TYPE_CHECKING:
    from cdml_edge.archive.base import Archive


@dataclass(frozen=True)
class ExpansionLimit:
    """Past ``floor`` bytes of stream, at most ``ratio`` times the compressed bytes read."""

    archive: str
    ratio: float
    floor: int

    @classmethod
    def of(cls, arc: Archive) -> ExpansionLimit:
        """The limit of an archive: its ``max_ratio`` past its ``max_member_bytes``."""
        return cls(arc.name, arc.max_ratio, arc.max_member_bytes)

    def exceeded(self, compressed: int, produced: int) -> bool:
        """Whether ``produced`` stream bytes from ``compressed`` are past the bound."""
        return produced > self.floor and produced > self.ratio * compressed

    def check(self, compressed: int, produced: int) -> None:
        """Raise :class:`StreamTooLargeError` when past the bound."""
        if self.exceeded(compressed, produced):
            raise self.error(compressed, produced)

    def error(self, compressed: int, produced: int) -> StreamTooLargeError:
        """The error of a stream stopped at ``produced`` bytes from ``compressed``."""
        return StreamTooLargeError(
            f"the tar stream expands to over {produced:,} bytes from {compressed:,} "
            f"compressed, over max_ratio={self.ratio:g} past max_member_bytes={self.floor:,} "
            "(a decompression bomb, or an archive of zeros to open with a higher max_ratio)",
            archive=self.archive,
        )
