"""The decoder process of :mod:`.isolation`: runs one request at a time until stdin closes.

A request is ``(module, function, args)``, pickled behind an 8-byte length; the answer
``("ok", result)``, ``("decode_error", reason)`` or ``("error", text)``, pickled with its
arrays out of band: the pickle, the count of buffers, then each buffer, each behind its
8-byte length.
Only the agent's own process talks to it, over its pipes.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
from typing import Any, BinaryIO

from .errors import DecodeError
from .isolation import _HEADER


def _answer(module: str, name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        fn = getattr(importlib.import_module(module), name)
        return ("ok", fn(*args))
    except DecodeError as exc:
        return ("decode_error", exc.reason)
    except MemoryError:
        return ("decode_error", "out of memory decoding it")
    except Exception as exc:  # any decoder failure becomes the member's refusal
        return ("error", f"{type(exc).__name__}: {exc}")


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests from ``inp`` on ``out`` until ``inp`` ends."""
    while True:
        head = inp.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(head)
        module, name, args = pickle.loads(inp.read(size))
        _reply(out, _answer(module, name, args))


def _reply(out: BinaryIO, answer: tuple[str, Any]) -> None:
    """``answer`` pickled, its arrays' buffers sent after it as they are (no copy)."""
    buffers: list[pickle.PickleBuffer] = []
    meta = pickle.dumps(answer, protocol=5, buffer_callback=buffers.append)
    out.write(_HEADER.pack(len(meta)))
    out.write(meta)
    out.write(_HEADER.pack(len(buffers)))
    for buffer in buffers:
        raw = buffer.raw()
        out.write(_HEADER.pack(raw.nbytes))
        out.write(raw)
    out.flush()


PRELOAD = ("cdml_edge.decode.image", "cdml_edge.decode.audio", "cdml_edge.decode.tabular")
"""Imported before the child says it is ready, so no request pays for an import."""

READY = b"ready\n"


def main() -> None:
    """Serve on the pipes: the protocol on the original stdout, anything else printed to stderr."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    for module in PRELOAD:
        importlib.import_module(module)
    out.write(READY)
    out.flush()
    serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
