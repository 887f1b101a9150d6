"""``cdml-edge scan ARCHIVE`` and ``cdml-edge pack DIR OUT``."""

from __future__ import annotations

from pathlib import Path

import typer

from cdml_edge.archive import ArchiveError
from cdml_edge.archive.pack import format_for_path
from cdml_edge.archive.scan import (
    ScanReport,
    list_folder,
    pack_dir,
    scan_archive,
    shown,
    unsafe_reason,
)
from cdml_edge.commands.exits import EXIT_FAILED, user_errors
from cdml_edge.commands.progress import bytes_bar
from cdml_edge.units import counted


def scan(
    archive: str = typer.Argument(
        ..., metavar="ARCHIVE", help="Archive path or s3:// URL (ZIP, tar.zst, tar)."
    ),
    members: bool = typer.Option(True, "--members/--summary", help="List every member."),
) -> None:
    """Read every member and check its checksum; exit 1 naming corrupt or unsafe members.

    Exit 2 when ARCHIVE is missing, 1 when it is not a readable archive.
    """
    with user_errors("scan", failed=(ArchiveError,)):
        report = scan_archive(archive)
    if members:
        for m in report.members:
            flag = " UNSAFE" if m.name in report.unsafe else ""
            flag += " BAD" if m.name in report.bad else ""
            flag += " REFUSED" if m.name in report.refused else ""
            line = f"{m.size:>12} {m.compressed_size:>12} {m.method:<8} {shown(m.name)}{flag}"
            typer.echo(line)
    typer.echo(
        f"{report.archive}: {report.format}, {counted(len(report.members), 'member')}, "
        f"{report.size} bytes ({report.compressed_size} compressed, ratio {report.ratio:.2f}), "
        f"reader: {report.engine}"
    )
    _report_lines(report)
    if not report.ok:
        typer.echo(
            f"{len(report.bad)} corrupt, {len(report.refused)} refused, "
            f"{len(report.unsafe)} unsafe members",
            err=True,
        )
        raise typer.Exit(EXIT_FAILED)
    typer.echo("all checksums OK")


def _report_lines(report: ScanReport) -> None:
    """What else the scan found: unchecked members, skipped entries, notes, problems."""
    if report.unchecked:
        typer.echo(
            f"{counted(report.unchecked, 'member')} without a stored checksum (read, not verified)"
        )
    for name, what in report.skipped.items():
        typer.echo(f"skipped (not a file): {shown(name)}: {what}")
    for note in report.notes:
        typer.echo(f"note: {note}")
    for name, why in report.bad.items():
        typer.echo(f"corrupt: {shown(name)}: {why}", err=True)
    for name, why in report.refused.items():
        typer.echo(f"refused: {shown(name)}: {why}", err=True)
    for name in report.unsafe:
        typer.echo(f"unsafe name: {shown(name)}: {unsafe_reason(name)}", err=True)


def pack(
    folder: Path = typer.Argument(
        ..., metavar="DIR", exists=True, file_okay=False, help="Folder to pack."
    ),
    out: Path = typer.Argument(..., metavar="OUT", help="Output archive: .zip or .tar.zst."),
    level: int = typer.Option(3, help="Compression level (deflate 1-9, zstd 1-22)."),
) -> None:
    """Pack every file under DIR into OUT (written atomically), with a progress bar."""
    with user_errors("pack"):
        format_for_path(out)  # an unknown suffix is refused before any work
        listing = list_folder(folder)
        listing.leave_out(out, "the output archive")  # packed again, it would nest
        for name, what in listing.skipped.items():
            if what == "the output archive":
                typer.echo(f"skipped (the output archive): {shown(name)}")
            else:
                typer.echo(f"skipped (not a regular file): {shown(name)}: {what}")
        total = sum(p.stat().st_size for _, p in listing.files)
        with bytes_bar(total) as advance:
            size = pack_dir(
                folder, out, level=level, on_file=lambda _n, sz: advance(sz), listing=listing
            )
    typer.echo(f"{out}: {size} bytes")


def register(app: typer.Typer) -> None:
    """Attach ``scan`` and ``pack`` to the root app."""
    app.command("scan")(scan)
    app.command("pack")(pack)
