"""The MQTT client's socket with fewer system calls: reads in chunks, writes gathered.

paho reads a packet a few bytes at a time (the type byte, each length byte, the rest: three
``recv`` calls for a 4-byte PUBACK) and sends each packet as it is queued. Every call
releases and takes back the interpreter lock, and with the agent's other threads waiting
for it each one can cost two thread switches. :class:`BatchedSocket` reads what has arrived
in one ``recv`` and hands it out from memory, and while :attr:`~BatchedSocket.gathering`
keeps what paho sends until :meth:`~BatchedSocket.flush` sends it in one call: a window's
messages go out together and their acknowledgements are read together.

The bytes on the wire are the same, in the same order. Bytes still buffered count as
``pending`` (as decrypted TLS bytes do), so the network loop reads them before it waits. A
failed send is raised by the next ``recv``, where paho notices a lost connection.

paho counts a QoS 0 message delivered once its bytes are sent: the publisher gathers only
QoS 1 and 2 messages, starts no turn while bytes of the last one wait for the socket
(:meth:`~BatchedSocket.unsent`), and a send behind such bytes is refused as "would block".
So memory holds at most one turn, and no message counts as sent that the kernel never took.
"""

from __future__ import annotations

import contextlib
import errno
import ssl
from collections.abc import Iterator
from typing import Any

READ_CHUNK = 65536
"""Bytes asked of the kernel per ``recv``: every acknowledgement that has arrived."""

_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class BatchedSocket:
    """Wraps a connected (non-blocking) socket for paho; other attributes pass through."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._rbuf = b""
        self._rpos = 0
        self._wbuf = bytearray()
        self._error: OSError | None = None
        self.gathering = False
        """While set, :meth:`send` keeps the bytes for :meth:`flush`."""

    def recv(self, bufsize: int) -> bytes:
        """Up to ``bufsize`` bytes: buffered ones first, else one ``recv`` of a chunk."""
        if self._rpos >= len(self._rbuf):
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            data = self._sock.recv(max(bufsize, READ_CHUNK))
            if len(data) <= bufsize:
                return bytes(data)
            self._rbuf, self._rpos = data, 0
        end = min(self._rpos + bufsize, len(self._rbuf))
        out = self._rbuf[self._rpos : end]
        self._rpos = end
        if end >= len(self._rbuf):
            self._rbuf, self._rpos = b"", 0
        return out

    def pending(self) -> int:
        """Bytes readable without waiting: buffered here, or decrypted by TLS.

        At least 1 while a send error waits to be raised by :meth:`recv`.
        """
        tls = getattr(self._sock, "pending", None)
        waiting = len(self._rbuf) - self._rpos + (tls() if tls is not None else 0)
        return waiting + (self._error is not None)

    def send(self, data: bytes | bytearray | memoryview) -> int:
        """All of ``data`` kept while gathering; else sent now, as much as the socket takes.

        Behind bytes still held (the socket took only part of a flush) nothing is taken:
        ``BlockingIOError``, so paho keeps the packet and sends it once they are out. A
        message is never reported sent while only this buffer holds it, outside a turn.
        """
        if self.gathering:
            self._wbuf += data
            return len(data)
        if self._wbuf:
            self.flush()
            if self._wbuf:
                raise BlockingIOError(errno.EAGAIN, "earlier bytes wait for the socket")
        return int(self._sock.send(data))

    def unsent(self) -> bool:
        """Gathered bytes wait for :meth:`flush` (or for the socket to take them)."""
        return bool(self._wbuf)

    def flush(self) -> None:
        """Send the gathered bytes, as many as the socket takes now.

        A send error other than "would block" drops them and is raised by the next
        :meth:`recv`, so paho handles the lost connection as it does its own.
        """
        while self._wbuf:
            try:
                sent = self._sock.send(self._wbuf)
            except _WOULD_BLOCK:
                return
            except OSError as exc:
                self._wbuf.clear()
                self._error = exc
                return
            del self._wbuf[:sent]

    def close(self) -> None:
        """Send what the socket takes of the gathered bytes (a DISCONNECT too), then close."""
        self.flush()
        self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@contextlib.contextmanager
def gathered(sock: Any) -> Iterator[None]:
    """What paho sends meanwhile goes out in one :meth:`~BatchedSocket.flush` at the end."""
    if not isinstance(sock, BatchedSocket):
        yield
        return
    sock.gathering = True
    try:
        yield
    finally:
        sock.gathering = False
        sock.flush()
