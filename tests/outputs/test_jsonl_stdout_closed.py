"""JSON lines to stdout whose reader went away (``EPIPE``): refused for good, said as such.

Any other error writing to stdout (a full disk under a redirection) stays an ``OSError``
that the next batch may get past.
"""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

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


# Results to stdout redirected to a file whose disk fills (a real file-size limit, which the
# kernel enforces like a full disk: what fits of a write is written, the rest refused).
_FILL_STDOUT = """
import json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from cdml_edge.outputs.jsonl import JsonlOutput
from cdml_edge.window.topics import OutMessage
out = JsonlOutput("-")
out.start()
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
msg = lambda i: OutMessage("cam1/result", json.dumps({"id": i, "pad": "x" * 250}).encode())
ok = []
for i in range(6):
    try:
        out.publish_batch([msg(f"r{i}")])
        ok.append(f"r{i}")
    except OSError:
        pass
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # room again
out.publish_batch([msg("r9")])
ok.append("r9")
print(json.dumps(ok), file=sys.stderr)
"""


@pytest.mark.parametrize("mode", ["wb", "ab"])  # `>` and `>>`
def test_stdout_on_a_full_disk_says_durable_only_for_lines_written_whole(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "results.jsonl"
    before = b'{"topic":"t","retain":false,"payload":{"id":"old"}}\n' if mode == "ab" else b""
    path.write_bytes(before)  # a line of an earlier run (appended to, never cut)
    flags = os.O_WRONLY | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
    sink = os.open(path, flags)  # as a shell opens it: no seek (offset 0 under `>>`)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _FILL_STDOUT],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(sink)
    assert proc.returncode == 0, proc.stderr
    durable = json.loads(proc.stderr.strip().splitlines()[-1])
    lines = path.read_bytes().splitlines()
    ids = []
    for line in lines:
        try:
            ids.append(json.loads(line)["payload"]["id"])
        except ValueError:
            ids.append(f"torn: {line[:20]!r}")
    whole = [i for i in ids if not i.startswith("torn: ")]
    assert whole == (["old"] if before else []) + durable  # whole lines, each one durable
    # stdout is never cut back (stderr may share it): a torn line is ended and counted
    assert path.read_bytes().endswith(b"\n")
    assert len(ids) - len(whole) <= 1
