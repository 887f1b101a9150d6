"""JSON lines to stdout whose reader went away (``EPIPE``): refused for good, said as such.

Any other error writing to stdout (a full disk under a redirection) stays an ``OSError``
that the next batch may get past.
"""

from __future__ import annotations

import errno
import io
import sys

import pytest

from cdml_edge.outputs.factory import degraded_parts
from cdml_edge.outputs.jsonl import JsonlOutput, StdoutClosed
from cdml_edge.window.topics import OutMessage

MSG = [OutMessage("cam/result", b'{"item": "a.jpg"}')]


class _Stdout(io.StringIO):
    def __init__(self, error: int) -> None:
        super().__init__()
        self.error, self.writes = error, 0

    def write(self, s: str) -> int:
        self.writes += 1
        raise OSError(self.error, "refused")


def test_a_broken_pipe_refuses_this_batch_and_every_later_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = _Stdout(errno.EPIPE)
    monkeypatch.setattr(sys, "stdout", out)
    jl = JsonlOutput("-")
    jl.start()
    durable: list[int] = []
    for _ in range(3):
        with pytest.raises(StdoutClosed):
            jl.publish_batch(MSG, lambda: durable.append(1))
    assert out.writes == 1  # not written at again once closed
    assert jl.stdout_closed and not durable
    assert jl.stats()["failed"] == 3
    assert degraded_parts(jl) == {"jsonl": "stdout is closed: nothing takes the results"}


def test_a_full_disk_under_stdout_is_not_a_closed_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Stdout(errno.ENOSPC)
    monkeypatch.setattr(sys, "stdout", out)
    jl = JsonlOutput("-")
    jl.start()
    for _ in range(2):
        with pytest.raises(OSError) as got:
            jl.publish_batch(MSG)
        assert not isinstance(got.value, StdoutClosed)
    assert out.writes == 2 and not jl.stdout_closed
