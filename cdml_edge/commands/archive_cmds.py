"""``cdml-edge scan ARCHIVE`` and ``cdml-edge pack DIR OUT``."""

from __future__ import annotations

from pathlib import Path

import typer

from cdml_edge.archive import ArchiveError
from cdml_edge.archive.scan import iter_dir, pack_dir, scan_archive

EXIT_BAD = 1


def scan(
    archive: str = typer.Argument(..., help="Archive path or s3:// URL (ZIP, tar.zst, tar)."),
    members: bool = typer.Option(True, "--members/--summary", help="List every member."),
) -> None:
    """Read every member and check its checksum; exit 1 naming corrupt or unsafe members."""
    try:
        report = scan_archive(archive)
    except ArchiveError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD) from None
    if members:
        for m in report.members:
            flag = " UNSAFE" if m.name in report.unsafe else ""
            flag += " BAD" if m.name in report.bad else ""
            typer.echo(f"{m.size:>12} {m.compressed_size:>12} {m.method:<8} {m.name}{flag}")
    typer.echo(
        f"{report.archive}: {report.format}, {len(report.members)} members, "
        f"{report.size} bytes ({report.compressed_size} compressed, ratio {report.ratio:.2f}), "
        f"reader: {report.engine}"
    )
    if report.unchecked:
        typer.echo(f"{report.unchecked} members have no stored checksum (read, not verified)")
    for name, why in report.bad.items():
        typer.echo(f"corrupt: {name}: {why}", err=True)
    for name in report.unsafe:
        typer.echo(f"unsafe name: {name}", err=True)
    if not report.ok:
        typer.echo(f"{len(report.bad)} corrupt, {len(report.unsafe)} unsafe members", err=True)
        raise typer.Exit(EXIT_BAD)
    typer.echo("all checksums OK")


def pack(
    folder: Path = typer.Argument(..., exists=True, file_okay=False, help="Folder to pack."),
    out: Path = typer.Argument(..., help="Output archive: .zip or .tar.zst."),
    level: int = typer.Option(3, help="Compression level (deflate 1-9, zstd 1-22)."),
) -> None:
    """Pack every file under FOLDER into OUT (written atomically), with a progress bar."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    total = sum(p.stat().st_size for _, p in iter_dir(folder))
    try:
        with Progress(TextColumn("packing"), BarColumn(), DownloadColumn()) as bar:
            task = bar.add_task("pack", total=total)
            size = pack_dir(folder, out, level=level, on_file=lambda _n, sz: bar.advance(task, sz))
    except ArchiveError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD) from None
    typer.echo(f"{out}: {size} bytes")


def register(app: typer.Typer) -> None:
    """Attach ``scan`` and ``pack`` to the root app."""
    app.command("scan")(scan)
    app.command("pack")(pack)
