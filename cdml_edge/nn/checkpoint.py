"""Checkpoints: written once, never overwritten, self-describing (model class + config)."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import fsync_dir, unique_name
from cdml_edge.model.spec import ModelSpec
from cdml_edge.nn.base import LatentModel
from cdml_edge.nn.registry import build_model

FORMAT = "cdml-checkpoint/1"


class CheckpointError(CdmlError, RuntimeError):
    """A checkpoint file is missing or unusable; the message names the file."""


def stem_for(epoch: int, spec: ModelSpec | None) -> str:
    """A checkpoint's name, which says what it holds.

    ``epoch-0006`` (a classifier, or a model without a spec) or ``epoch-0006-anomaly`` (an
    anomaly model, scorer included).
    """
    task = spec.task if spec is not None else "classifier"
    return f"epoch-{epoch:04d}" + ("" if task == "classifier" else f"-{task}")


def write_new(directory: Path, stem: str, payload: dict[str, Any]) -> Path:
    """Save ``payload`` as ``stem.pt`` (``stem.1.pt``, ... if taken); never replaces a file.

    The bytes go to a temporary file first (fsynced), which is then hard-linked to the first
    free name of :func:`cdml_edge.fsio.unique_name`'s series, and the folder is fsynced.
    The temporary file is removed however this ends (a full disk, Ctrl-C); an ``OSError``
    of the write names the checkpoint it was writing.
    ``link`` fails on an existing name, so claiming a name is atomic and two writers can
    never clobber each other; ``atomic_write`` (rename) would replace a file that appeared
    after the name was chosen.
    """
    directory.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(payload, buf)
    tmp = directory / f".{stem}.{os.getpid()}.tmp"
    try:
        try:
            with open(tmp, "wb") as f:
                f.write(buf.getvalue())
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:  # a full disk: say where (a write's error names no file)
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(directory / f"{stem}.pt")) from exc
        path = unique_name(directory, f"{stem}.pt", exists=_claim_by_link(tmp), attempts=10_000)
    except FileExistsError:
        raise CheckpointError(f"{directory}: no free checkpoint name for {stem}") from None
    finally:  # also on Ctrl-C or a full disk: no partial file is left behind
        tmp.unlink(missing_ok=True)
    fsync_dir(directory)
    return path


def _claim_by_link(tmp: Path) -> Callable[[Path], bool]:
    """An ``exists`` test for :func:`unique_name` that claims a free name by linking ``tmp``.

    True (taken) when the name exists, False once ``tmp`` is linked there.
    """

    def taken(path: Path) -> bool:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return True
        return False

    return taken


def load(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint dict (on the CPU) and check its format."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: checkpoint not found")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"{p}: cannot read checkpoint: {exc}") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a {FORMAT} checkpoint")
    return ckpt


def load_model(path: str | Path) -> tuple[LatentModel, ModelSpec | None, dict[str, Any]]:
    """Rebuild the model of a checkpoint; returns ``(model, spec or None, checkpoint)``."""
    ckpt = load(path)
    model = build_model(ckpt["model_class"], ckpt["model_config"])
    model.load_state_dict(ckpt["model"])
    model.eval()
    spec = ModelSpec.model_validate_json(ckpt["spec"]) if ckpt.get("spec") else None
    return model, spec, ckpt
