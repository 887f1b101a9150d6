"""Does a described model fit its graph? Every mismatch, named by its configuration key.

:func:`graph_problems` compares a spec and head (from :mod:`cdml_edge.model.describe`) with
the onnxruntime session: the input exists, its rank, fixed sizes and element type match,
the outputs exist, a classifier's width matches its labels, a YOLO row fits the labels.
A model with our ``cdml.spec`` metadata is held to the same (its input name, shape and type;
its labels against ``logits``). ``config validate``, ``doctor`` and ``run`` report them
before any item is scored.
"""

from __future__ import annotations

from typing import Any

from cdml_edge.model.heads import ClassifierHead, DetectorHead, Head, SpecHead
from cdml_edge.model.spec import ModelSpec

_TYPES = {"float32": "tensor(float)", "uint8": "tensor(uint8)", "float16": "tensor(float16)"}


def _shape(dims: list[Any]) -> str:
    return "x".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in dims)


def graph_problems(session: Any, spec: ModelSpec, head: Head) -> list[str]:
    """What does not fit, one line each (empty when the description fits the graph)."""
    inputs = {i.name: i for i in session.get_inputs()}
    gi = inputs.get(spec.input_name)
    if gi is None:
        return [
            f"input.name: {spec.input_name!r} is not an input of the graph ({', '.join(inputs)})"
        ]
    out = _input_problems(gi, spec)
    outputs = {o.name: o for o in session.get_outputs()}
    missing = [o for o in head.outputs if o not in outputs]
    if missing:
        have = ", ".join(outputs)
        return [
            *out,
            f"output: {', '.join(map(repr, missing))} not among the graph's outputs ({have})",
        ]
    return out + _output_problems(outputs, spec, head)


def _input_problems(gi: Any, spec: ModelSpec) -> list[str]:
    out: list[str] = []
    want = [None, *spec.input.shape()]
    have = list(gi.shape)
    layout = getattr(spec.input, "layout", "")
    if len(have) != len(want):
        out.append(
            f"input: the graph's {gi.name!r} is {_shape(have)} ({len(have)} dimensions); "
            f"the description gives N x {_shape(want[1:])} {layout}".rstrip()
        )
    else:
        bad = [
            i
            for i, (h, w) in enumerate(zip(have, want, strict=True))
            if w is not None and isinstance(h, int) and h > 0 and h != w
        ]
        if bad:
            out.append(
                f"input: the graph's {gi.name!r} is {_shape(have)}; the description "
                f"gives N x {_shape(want[1:])} {layout} (size, layout or channels)".rstrip()
            )
    if gi.type != _TYPES[spec.input.dtype]:
        out.append(
            f"input.dtype: the graph's {gi.name!r} is {gi.type}, the description says "
            f"{spec.input.dtype}"
        )
    return out


def _output_problems(outputs: dict[str, Any], spec: ModelSpec, head: Head) -> list[str]:
    classes = None  # (output, labels) of a classifier
    if isinstance(head, ClassifierHead):
        classes = (head.output, head.labels)
    elif isinstance(head, SpecHead) and "logits" in head.outputs and "logits" in outputs:
        classes = ("logits", head.labels)  # our metadata's labels for the graph's logits
    if classes is not None:
        output, labels = classes
        dims = list(outputs[output].shape)
        width = dims[-1] if dims and isinstance(dims[-1], int) and dims[-1] > 0 else None
        if width is not None and width != len(labels):
            return [f"labels: {len(labels)} labels for the {width} classes of output {output!r}"]
    if isinstance(head, DetectorHead) and head.format == "yolo":
        dims = [d for d in outputs[head.output].shape[-2:] if isinstance(d, int) and d > 0]
        n = len(head.labels)
        if dims and not {4 + n, 5 + n} & set(dims):
            return [
                f"labels: a YOLO row of output {head.output!r} holds 4 (+1) + one score per "
                f"label = {4 + n} or {5 + n} values; the graph gives {_shape(dims)}"
            ]
    return []


__all__ = ["graph_problems"]
