"""``cdml-edge test``: score a few files through the live pipeline, with no side effects."""

from __future__ import annotations

from pathlib import Path

import typer

from cdml_edge.commands.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail, user_errors
from cdml_edge.config import load_config
from cdml_edge.units import counted


def test(
    files: list[Path] = typer.Argument(
        None, metavar="FILE", help="Files to score (each by its source)."
    ),
    config: Path = typer.Option(..., "--config", "-c", help="The YAML configuration file."),
    source: str | None = typer.Option(
        None,
        "--source",
        help="Score FILES as this source's, or without FILES a few files "
        "from its folder (read only).",
    ),
    count: int = typer.Option(5, "--count", min=1, help="Files --source takes from its folder."),
) -> None:
    """Score FILES through the exact live pipeline and print the messages it would publish.

    The live decoders, models and payloads; one JSON line per message; nothing is published,
    moved or kept. Exit 1 if any file fails.
    """
    from cdml_edge.agent.preflight import check_files, check_models
    from cdml_edge.agent.runners import load_models
    from cdml_edge.agent.trial import run_trial, sample_files, source_for, source_named
    from cdml_edge.outputs.jsonl import format_line

    with user_errors("test"):
        cfg = load_config(config)
        check_files(cfg, str(config))
        where = str(config)
        if files:
            chosen = source_named(cfg, source, where) if source else None
            pairs = [(chosen or source_for(cfg, f, where), f) for f in files]
        elif source:
            sc = source_named(cfg, source, where)
            pairs = [(sc, f) for f in sample_files(sc, count)]
            if not pairs:
                fail("test", f"source {sc.name}: no files to try in {sc.path}", EXIT_USAGE)
        else:
            fail("test", "give FILES to score or --source NAME", EXIT_USAGE)
        runners = load_models(cfg)
        check_models(cfg, runners, where)
        report = run_trial(cfg, pairs, runners)
    prefix = cfg.mqtt.topic_prefix if cfg.mqtt else "cdml"
    for m in report.messages:
        typer.echo(format_line(m, prefix, cfg.device.id), nl=False)
    typer.echo(f"{counted(report.items, 'file')}, {report.failures} failed", err=True)
    raise typer.Exit(EXIT_OK if report.ok else EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Attach ``test`` to the root app."""
    app.command("test")(test)
