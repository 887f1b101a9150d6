"""Results on stdout redirected with ``> f 2>&1``: a refused write cuts nothing back.

Stdout is not the output's alone: stderr's log lines (and whatever else holds the file)
go into the same file. When the disk refused part of a window's lines, the output cut the
file back to where the window began: log lines written there meanwhile were cut off with
it. Now stdout is never cut back: a line left part-written is ended with a newline (at
once, or before the next line when the disk has no room even for that) and counted as
``torn_lines``; every line a reader gets is whole or a counted torn line, and every log line
stays. A file the output opened itself is still cut back (tests/outputs/test_jsonl_lines.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Each write to stdout is preceded by a log line on stderr (another thread logging right
# then), both into one file; a real file-size limit fills it (the kernel writes what fits of
# a write and refuses the rest, as a full disk does).
_SHARED = """
import json, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from cdml_edge.outputs.jsonl import JsonlOutput
from cdml_edge.window.topics import OutMessage
report = sys.argv[1]
logged = [0]
real_write = os.write
def write(fd, data):
    if fd == 1:
        try:
            real_write(2, b"a log line\\n")
            logged[0] += 1
        except OSError:
            pass
    return real_write(fd, data)
os.write = write
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
with open(report, "w") as fh:
    json.dump({"ok": ok, "logged": logged[0], "stats": out.stats()}, fh)
"""

LOG = b"a log line"


def test_a_refused_write_to_a_shared_stdout_cuts_no_log_line(tmp_path: Path) -> None:
    path, report = tmp_path / "run.log", tmp_path / "report.json"
    sink = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # `> run.log 2>&1`
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SHARED, str(report)],
            stdout=sink,
            stderr=sink,
            timeout=60,
        )
    finally:
        os.close(sink)
    assert proc.returncode == 0, path.read_bytes()[-2000:]
    seen = json.loads(report.read_text())
    data = path.read_bytes()
    assert data.endswith(b"\n")
    assert data.count(LOG + b"\n") == seen["logged"] > 0  # every log line stayed
    ids, torn = [], 0
    for line in data.splitlines():
        if not line:  # the newline that ends a torn line, where a log line ended it first
            continue
        if line.endswith(LOG):  # a log line; what came before it on the line is torn
            torn += line != LOG
            continue
        try:
            ids.append(json.loads(line)["payload"]["id"])
        except ValueError:
            torn += 1
    assert ids == seen["ok"], ids  # each durable line whole, in order; no refused one whole
    assert torn == seen["stats"]["torn_lines"] >= 1, (torn, seen["stats"])
