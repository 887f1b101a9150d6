"""The progress ``cdml-edge export`` shows: both passes, the sidecars' and the bytes'."""

from __future__ import annotations

from pathlib import Path

from helpers.retention_data import make_window

from cdml_edge.commands.progress import RunBar
from cdml_edge.retrain.export_job import ExportOptions, run_export
from cdml_edge.store.retention import RetentionRing

T0 = 1_790_000_000.0


class Recorder:
    """A :class:`~cdml_edge.retrain.progress.RunProgress` that keeps what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def start(self, total: int | None) -> None:
        self.events.append(("start", total))

    def set_total(self, total: int) -> None:
        self.events.append(("total", total))

    def advance(self, n: int) -> None:
        self.events.append(("advance", n))

    def restart(self, description: str, total: int | None) -> None:
        self.events.append((description, total))

    def stop(self) -> None:
        self.events.append(("stop", None))


def _ring(path: Path, windows: int) -> int:
    ring = RetentionRing(path, max_bytes=10**8, fsync=False)
    size = 0
    for w in range(windows):
        files = [(f"w{w}_{i}.png", bytes([w, i]) * 50) for i in range(3)]
        size += sum(len(data) for _, data in files)
        assert ring.store(*make_window(f"w{w}", T0 + w, files, labels=["ok"] * 3)).stored
    ring.close()
    return size


def test_export_shows_the_selection_pass_then_the_bytes(tmp_path: Path) -> None:
    """Reading every sidecar (pass 1) used to show an empty bar: minutes on a large ring."""
    size = _ring(tmp_path / "ring", 5)
    bar = Recorder()
    run_export(ExportOptions(tmp_path / "ring", tmp_path / "t.zip"), bar)
    ev = bar.events
    selecting = ev.index(("export: selecting", 5))
    reading = ev.index(("export: reading", size))
    assert selecting < reading
    assert ev[selecting + 1 : reading] == [("advance", 1)] * 5  # one step a window
    writing = ev.index(("export: writing", size))  # then the archive is written
    assert sum(int(str(n)) for what, n in ev[reading:writing] if what == "advance") == size
    assert ev[-1] == ("stop", None)


def test_the_command_bar_restarts_for_each_pass(tmp_path: Path) -> None:
    bar = RunBar("export")
    bar.start(None)
    bar.advance(3)
    bar.restart("export: reading", 10)
    task = bar._progress.tasks[0]
    assert (task.description, task.total, task.completed) == ("export: reading", 10, 0)
    bar.stop()


def test_a_refused_window_still_completes_the_bar(tmp_path: Path) -> None:
    size = _ring(tmp_path / "ring", 3)
    first = sorted((tmp_path / "ring").glob("*.zip"))[0]
    first.unlink()
    first.symlink_to("/dev/zero")  # refused, never read: its bytes count as done
    bar = Recorder()
    summary = run_export(ExportOptions(tmp_path / "ring", tmp_path / "t.zip"), bar)
    assert len(summary.stats.refused) == 1 and summary.stats.exported == 6
    # refused in the first pass (as the fleet export's plan refuses it): its items are not
    # picked, so the second pass reads the others' bytes, and its bar completes
    [(reading, total)] = [
        (i, int(str(n))) for i, (what, n) in enumerate(bar.events) if what == "export: reading"
    ]
    assert 0 < total < size
    writing = next(i for i, (what, _) in enumerate(bar.events) if what == "export: writing")
    assert sum(int(str(n)) for what, n in bar.events[reading:writing] if what == "advance") == total


def test_writing_the_archive_is_a_phase_after_reading(tmp_path: Path) -> None:
    """Writing the archive is a phase of its own, after reading.

    Writing (compressing, fsync) took 0.89 s of 1.03 s for 63 MB of CSV to a ZIP; the bar used
    to stay on ``export: reading``, full, meanwhile.
    """
    size = _ring(tmp_path / "ring", 4)
    bar = Recorder()
    out = tmp_path / "t.tar.zst"
    run_export(ExportOptions(tmp_path / "ring", out), bar)
    ev = bar.events
    phases = [what for what, _ in ev if str(what).startswith("export: ")]
    assert phases == ["export: selecting", "export: reading", "export: writing"], ev
    reading = ev.index(("export: reading", size))
    writing = ev.index(("export: writing", size))
    assert sum(int(str(n)) for what, n in ev[reading:writing] if what == "advance") == size
    assert ev[writing + 1 :] == [("advance", size), ("stop", None)]  # full once written
    assert out.is_file()
