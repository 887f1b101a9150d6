"""ONNX export with metadata from :class:`ModelSpec` and a parity check against torch.

The graph has one input ``input`` with a dynamic batch dimension and the outputs named
in ``spec.outputs``: ``logits`` + ``latent`` for classifiers, ``anomaly`` + ``latent``
for anomaly models (the scorer is part of the graph). The TorchScript-based exporter
(``dynamo=False``) is used: it writes a single self-contained file at a fixed opset.
"""

from __future__ import annotations

import copy
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from cdml_edge.errors import CdmlError
from cdml_edge.fsio import fsync_dir
from cdml_edge.model.spec import INPUT_NAME, ModelSpec, load_onnx_model
from cdml_edge.nn import checkpoint
from cdml_edge.nn.base import LatentModel
from cdml_edge.nn.cda import AnomalyHead, AnomalyScorer

OPSET = 17
PARITY_TOLERANCE = 1e-4


class OnnxExportError(CdmlError, RuntimeError):
    """Export failed or the exported graph disagrees with torch; names the file."""


@dataclass(frozen=True)
class ExportReport:
    """An exported model: its file, opset, torch/onnxruntime parity, size and outputs."""

    path: Path
    opset: int
    max_abs_diff: float
    size_bytes: int
    outputs: list[str]


class _ClassifierGraph(nn.Module):
    def __init__(self, model: LatentModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.model.compress(x)
        return self.model.classifier(z), z


class _LatentGraph(nn.Module):
    def __init__(self, model: LatentModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.compress(x)


def export_graph(
    model: LatentModel, spec: ModelSpec, scorer: AnomalyScorer | None = None
) -> tuple[nn.Module, list[str]]:
    """The module that is exported and its output names, as the spec asks."""
    if spec.task == "anomaly":
        if scorer is None:
            raise OnnxExportError(f"{spec.name}: an anomaly model needs a fitted AnomalyScorer")
        return AnomalyHead(model, scorer), ["anomaly", "latent"]
    if model.head is None:
        return _LatentGraph(model), ["latent"]
    return _ClassifierGraph(model), ["logits", "latent"]


def export_onnx(
    model: LatentModel,
    spec: ModelSpec,
    path: str | Path,
    scorer: AnomalyScorer | None = None,
    opset: int = OPSET,
    tolerance: float = PARITY_TOLERANCE,
    check_inputs: torch.Tensor | None = None,
) -> ExportReport:
    """Export ``model`` to ``path`` and verify it in onnxruntime (fail above ``tolerance``).

    The file is written to a hidden temporary file beside ``path`` (fsynced), checked there,
    then renamed into place: an interrupted or failed export leaves ``path`` as it was.
    """
    out = Path(path)
    if out.is_dir():
        raise OnnxExportError(f"{out}: is a folder; give the .onnx file to write")
    out.parent.mkdir(parents=True, exist_ok=True)
    graph, names = export_graph(copy.deepcopy(model).cpu(), spec, scorer)
    graph = graph.cpu().eval()  # a copy: the caller's model keeps its device and mode
    if spec.task == "anomaly" and spec.anomaly_threshold is None:
        raise OnnxExportError(f"{out}: spec has no anomaly_threshold")
    spec = spec.model_copy(update={"outputs": names})
    proto = _exported(graph, spec, names, opset, out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        try:
            _save_model(proto.SerializeToString(), tmp)
        except OSError as exc:  # a full disk: name the file asked for, not the temporary one
            raise OSError(exc.errno, exc.strerror, str(out)) from exc
        diff = parity(graph, tmp, spec, check_inputs)
        if not diff <= tolerance:
            raise OnnxExportError(
                f"{out}: onnxruntime differs from torch by {diff:.3g} > {tolerance}"
            )
        tmp.replace(out)
    finally:  # also on Ctrl-C or a full disk: no partial file is left behind
        tmp.unlink(missing_ok=True)
    fsync_dir(out.parent)
    return ExportReport(out, opset, diff, out.stat().st_size, names)


def _exported(graph: nn.Module, spec: ModelSpec, names: list[str], opset: int, out: Path) -> Any:
    """The ONNX ``ModelProto`` of ``graph`` at ``opset``, with ``spec`` as its metadata, checked.

    Exported in memory: only the finished file touches the disk. A graph the exporter or the
    ONNX checker refuses (an opset too old for an operator) is an :class:`OnnxExportError`
    naming ``out`` and the opset.
    """
    import onnx

    example = torch.randn(2, *spec.input.shape())
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                graph,
                (example,),
                buf,  # type: ignore[arg-type]  # the TorchScript exporter writes to a file object
                input_names=[INPUT_NAME],
                output_names=names,
                dynamic_axes={n: {0: "batch"} for n in [INPUT_NAME, *names]},
                opset_version=opset,
                dynamo=False,
            )
        proto = onnx.load_from_string(buf.getvalue())
        del proto.metadata_props[:]
        for key, value in spec.to_metadata().items():
            entry = proto.metadata_props.add()
            entry.key, entry.value = key, value
        proto.producer_name = "cdml-edge"
        proto.model_version = _int_version(spec.version)
        onnx.checker.check_model(proto)
    except (RuntimeError, ValueError, onnx.checker.ValidationError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OnnxExportError(f"{out}: cannot export at opset {opset}: {first}") from exc
    return proto


def _save_model(data: bytes, path: Path) -> None:
    """Write the serialised model to ``path`` and fsync it (before it is renamed into place)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _int_version(version: str) -> int:
    parts = [int(p) if p.isdigit() else 0 for p in version.split(".")[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2]


@torch.no_grad()
def parity(
    graph: nn.Module,
    onnx_path: str | Path,
    spec: ModelSpec,
    inputs: torch.Tensor | None = None,
) -> float:
    """Max abs difference between torch and onnxruntime over all outputs (batches 1 and 7)."""
    session, file_spec = load_onnx_model(onnx_path)
    batches = (
        [inputs]
        if inputs is not None
        else [
            torch.randn(1, *spec.input.shape(), generator=torch.Generator().manual_seed(0)),
            torch.randn(7, *spec.input.shape(), generator=torch.Generator().manual_seed(1)),
        ]
    )
    worst = 0.0
    for x in batches:
        ref = graph(x)
        ref_t = ref if isinstance(ref, tuple) else (ref,)
        got = session.run(list(file_spec.outputs), {INPUT_NAME: x.numpy()})
        for r, g in zip(ref_t, got, strict=True):
            worst = max(worst, float(np.max(np.abs(r.numpy() - np.asarray(g)))))
    return worst


def export_checkpoint(ckpt_path: str | Path, out_path: str | Path, **kwargs: Any) -> ExportReport:
    """Export a trainer checkpoint (it must carry a spec; anomaly ones a fitted scorer)."""
    model, spec, ckpt = checkpoint.load_model(ckpt_path)
    if spec is None:
        raise OnnxExportError(f"{ckpt_path}: checkpoint has no ModelSpec; train with spec=...")
    scorer = None
    if spec.task == "anomaly":
        state = ckpt.get("extra", {}).get("anomaly")
        if state is None:
            raise OnnxExportError(f"{ckpt_path}: anomaly checkpoint has no fitted scorer")
        scorer = AnomalyScorer.from_state(state)
        spec = spec.model_copy(update={"anomaly_threshold": scorer.threshold})
    return export_onnx(model, spec, out_path, scorer=scorer, **kwargs)
