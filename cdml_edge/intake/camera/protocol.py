"""The messages a capture process writes to its stdout: a 13-byte header, then a payload.

Header ``!cIq``: the kind (one byte), the payload length, a wall-clock timestamp in ns.

=====  ==========================================================================
kind   payload
=====  ==========================================================================
``S``  started: OpenCV imported, opening the camera now (empty)
``O``  opened: JSON ``{"width", "height", "fps", "backend", "mode"}``
``F``  a frame: JPEG bytes; the timestamp is when the frame was grabbed
``H``  heartbeat while no frame is due: JSON ``{"grabbed": n}``
``L``  lag of a live capture's grabs behind the stream's clock, at most once a second:
       JSON ``{"lag_s": seconds, "grabbed": n}`` (see :mod:`~.lag`)
``E``  a video file ended (``loop`` off): empty; the process exits 0
``X``  a failure (cannot open, no frame before the read timeout): UTF-8 text; exit 1
=====  ==========================================================================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct("!cIq")
MAX_PAYLOAD = 64 * 1024 * 1024
"""A bigger message is a protocol error (an 8K JPEG is far below it)."""

STARTED, OPENED, FRAME, HEARTBEAT, ENDED, FAILED = b"S", b"O", b"F", b"H", b"E", b"X"
LAG = b"L"
KINDS = frozenset({STARTED, OPENED, FRAME, HEARTBEAT, LAG, ENDED, FAILED})


class ProtocolError(ValueError):
    """The child wrote something that is not a message (corrupt, oversized)."""


@dataclass(frozen=True)
class Message:
    """One decoded message: its kind, timestamp (ns) and payload."""

    kind: bytes
    ts_ns: int
    payload: bytes


def encode(kind: bytes, payload: bytes = b"", ts_ns: int = 0) -> bytes:
    """One message as bytes."""
    return HEADER.pack(kind, len(payload), ts_ns) + payload


class MessageDecoder:
    """Splits a byte stream into messages; holds at most one partial message."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        """Add ``data``; the messages now complete. :class:`ProtocolError` on a bad header."""
        self._buf += data
        out: list[Message] = []
        while len(self._buf) >= HEADER.size:
            kind, length, ts_ns = HEADER.unpack_from(self._buf)
            if kind not in KINDS or length > MAX_PAYLOAD:
                raise ProtocolError(f"bad message header: kind {kind!r}, {length} bytes")
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            out.append(Message(kind, ts_ns, bytes(self._buf[HEADER.size : end])))
            del self._buf[:end]
        return out

    @property
    def buffered(self) -> int:
        """Bytes held of a partial message."""
        return len(self._buf)
