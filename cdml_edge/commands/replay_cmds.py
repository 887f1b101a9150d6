"""``cdml-edge replay`` and ``cdml-edge export``: the retraining loop on retained windows."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cdml_edge.config import ConfigError, load_config

EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_REPLAY_OUT = "replay-results.jsonl"


def _progress():  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )


def _when(text: str | None, what: str) -> float | None:
    from cdml_edge.retrain.filters import FilterError, parse_time

    if text is None:
        return None
    try:
        return parse_time(text)
    except FilterError as exc:
        typer.echo(f"{what}: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


def replay(
    directory: Path | None = typer.Argument(
        None, help="Retention folder (default: retention.dir of the configuration)."
    ),
    config: Path = typer.Option(..., "--config", "-c", help="The YAML configuration file."),
    model: list[Path] = typer.Option(
        [], "--model", help="A new .onnx model; replaces the configured one of its modality."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Windows closed at or after: ISO time, unix seconds or age (7d)."
    ),
    until: str | None = typer.Option(None, "--until", help="Windows closed before this time."),
    source: str | None = typer.Option(None, "--source", help="Only this source."),
    publish: bool = typer.Option(
        False, "--publish", help="Publish results on {prefix}/{device}/replay/{source}/..."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help=f"Results as JSON lines (default without --publish: {DEFAULT_REPLAY_OUT}).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Re-score retained windows (archive order, full speed) with the current pipeline."""
    from cdml_edge.model.runner import InferenceError
    from cdml_edge.retrain.replay import (
        ReplayedWindow,
        ReplayStats,
        iter_replay,
        load_replay_runners,
        replay_to_jsonl,
        segment_rows_of,
    )
    from cdml_edge.store.sidecar import RetentionError, list_retained

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    ring = directory or (cfg.retention.dir if cfg.retention else None)
    if ring is None:
        typer.echo("no retention folder: give DIR or set retention.dir", err=True)
        raise typer.Exit(EXIT_USAGE)
    t_since, t_until = _when(since, "--since"), _when(until, "--until")
    try:
        records = list_retained(ring, t_since, t_until, source)
        runners = load_replay_runners(cfg, model)
    except (RetentionError, InferenceError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_FAILED) from None
    if not runners:
        typer.echo("no model: configure models or give --model", err=True)
        raise typer.Exit(EXIT_USAGE)
    if out is None and not publish:
        out = Path(DEFAULT_REPLAY_OUT)

    output = None
    if publish:
        from cdml_edge.agent.app import make_output

        output = make_output(cfg)
        output.start()
    total = sum(r.n_items for r in records)
    progress = None if quiet else _progress()
    task = progress.add_task("replay", total=total) if progress else None

    def on_window(win: ReplayedWindow) -> None:
        if output is not None:
            output.publish_batch(win.messages())
        if progress is not None and task is not None:
            progress.advance(task, win.record.n_items)

    rows = segment_rows_of(cfg)
    try:
        if progress:
            progress.start()
        if out is not None:
            st = replay_to_jsonl(
                ring, runners, out, segment_rows=rows, on_window=on_window, records=records
            )
        else:
            st = ReplayStats()
            for win in iter_replay(ring, runners, segment_rows=rows, stats=st, records=records):
                on_window(win)
    finally:
        if progress:
            progress.stop()
        if output is not None:
            output.stop(timeout=30.0)
    where = f" -> {out}" if out is not None else ""
    typer.echo(
        f"replayed {st.windows} windows, {st.items} results ({st.items_per_s:.0f} items/s), "
        f"{st.changed_labels} labels and {st.changed_anomalies} anomaly flags changed, "
        f"{st.failures} failed, {st.missing} missing{where}"
    )


def export(
    directory: Path = typer.Argument(..., help="Retention folder."),
    out: Path = typer.Argument(..., help="Training archive to write (.zip or .tar.zst)."),
    filters: list[str] = typer.Option(
        [], "--filter", help="FIELD OP VALUE, e.g. 'label=defect', 'anomaly>0.8' (all must hold)."
    ),
    since: str | None = typer.Option(None, "--since", help="Windows closed at or after."),
    until: str | None = typer.Option(None, "--until", help="Windows closed before."),
    source: str | None = typer.Option(None, "--source", help="Only this source."),
    labels: Path | None = typer.Option(
        None, "--labels", help="Relabel CSV (label + id, or window_id + name, or name)."
    ),
    split: str | None = typer.Option(
        None, "--split", help="train/val[/test] fractions, e.g. 0.8/0.1/0.1."
    ),
    level: int = typer.Option(3, "--level", help="Compression level (zip 1-9, zstd 1-22)."),
    max_bytes: str = typer.Option(
        "2GiB", "--max-bytes", help="Refuse selections larger than this (held in memory)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Build a training archive (class folders) from retained windows, with provenance."""
    from cdml_edge.retrain.export import ExportError, export_trainset, load_relabels, parse_split
    from cdml_edge.retrain.filters import FilterError, parse_filters
    from cdml_edge.units import parse_size

    try:
        parsed = parse_filters(filters)
        fractions = parse_split(split) if split else None
        relabels = load_relabels(labels) if labels else None
        bound = parse_size(max_bytes)
    except (FilterError, ExportError, ValueError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_USAGE) from None
    t_since, t_until = _when(since, "--since"), _when(until, "--until")
    progress = None if quiet else _progress()
    task = progress.add_task("export", total=None) if progress else None

    def on_total(n: int) -> None:
        if progress is not None and task is not None:
            progress.update(task, total=n)

    def advance(n: int) -> None:
        if progress is not None and task is not None:
            progress.advance(task, n)

    describe = {
        "filters": list(filters),
        "since": t_since,
        "until": t_until,
        "source": source,
        "relabels": labels.name if labels else None,
    }
    try:
        if progress:
            progress.start()
        st = export_trainset(
            directory,
            out,
            filters=parsed,
            since=t_since,
            until=t_until,
            source=source,
            relabels=relabels,
            split=fractions,
            level=level,
            max_bytes=bound,
            progress=advance,
            on_total=on_total,
            describe=describe,
        )
    except ExportError as exc:
        if progress:
            progress.stop()
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_FAILED) from None
    if progress:
        progress.stop()
    typer.echo(
        f"exported {st.exported} items from {st.windows} windows -> {out} "
        f"({st.bytes_out} bytes, {st.mb_per_s:.1f} MB/s)"
    )
    typer.echo(
        json.dumps(
            {
                "classes": st.classes,
                "splits": st.splits,
                "skipped": {
                    "filtered": st.filtered,
                    "unlabelled": st.unlabelled,
                    "dropped": st.dropped,
                    "unsafe": st.unsafe,
                    "corrupt": st.corrupt,
                    "missing_windows": st.missing_windows,
                },
                "relabelled": st.relabelled,
                "relabels_unused": st.relabels_unused,
            },
            sort_keys=True,
        )
    )


def register(app: typer.Typer) -> None:
    """Attach ``replay`` and ``export`` to the root app."""
    app.command("replay")(replay)
    app.command("export")(export)
