"""Forks made by two threads at once: each fork's release watch gets its own pipe.

The hooks around a fork run Python code (logging's, for one), so another thread may start
a fork of its own between this thread's ``fork()`` and its after-hook. The pipes of the
forks under way were one list for all threads: the first thread then took the second
one's pipe, whose write end its own child never held, and a batch it forked under was
released while that child still ran (the worker could write the next batch into it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Hooks registered before cdml_edge's (after logging's): their before-hook runs after
# buffer_release's, their after_in_parent before buffer_release's. They hold thread A between
# its fork and buffer_release's after-hook until thread B's fork has made its pipe.
SCENARIO = textwrap.dedent(
    """
    import gc, mmap, os, threading, time

    b_pushed, a_done, roles = threading.Event(), threading.Event(), {}

    def before():
        if roles.get(threading.get_ident()) == "B":
            b_pushed.set()
            a_done.wait(10)

    def after_parent():
        if roles.get(threading.get_ident()) == "A":
            b_pushed.wait(10)

    import numpy as np
    import torch  # logging's fork hooks (its lock) are registered by now: they run outside ours

    os.register_at_fork(before=before, after_in_parent=after_parent)
    from cdml_edge.data import buffer_release

    released = []
    fd = os.memfd_create(buffer_release.MEMFD_NAME.decode(), os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    mm = mmap.mmap(fd, 4096)
    os.close(fd)
    arr = np.frombuffer(mm, np.uint8)
    batch = torch.from_numpy(arr)
    buffer_release.watch(arr, batch, lambda: released.append(1), shared=True)
    del arr
    r, w = os.pipe()
    children = {}

    def thread_a():
        roles[threading.get_ident()] = "A"
        pid = os.fork()
        if pid == 0:  # forked while the batch is alive: may read it until told to end
            os.read(r, 1)
            os._exit(0)
        children["a"] = pid

    def thread_b():
        roles[threading.get_ident()] = "B"
        time.sleep(0.2)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    a, b = threading.Thread(target=thread_a), threading.Thread(target=thread_b)
    a.start(); b.start(); a.join()
    del batch
    gc.collect()
    buffer_release.sweep()
    alive = os.waitpid(children["a"], os.WNOHANG)[0] == 0
    early = bool(released)
    a_done.set(); b.join()
    os.write(w, b"x")
    os.waitpid(children["a"], 0)
    buffer_release.sweep()
    print(f"alive={alive} early={early} after={bool(released)}")
    """
)


def test_a_fork_keeps_its_own_pipe_when_another_thread_forks_meanwhile() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCENARIO],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "alive=True early=False after=True", run.stdout + run.stderr
