"""The configured models: onnxruntime loads each with its provider and runs a zero input."""

from __future__ import annotations

from cdml_edge.config import AppConfig
from cdml_edge.doctor.check import Check, guard
from cdml_edge.modality import model_fits


def check_model(modality: str, cfg: AppConfig) -> Check:
    """Load ``models.<modality>`` (any model name) as ``run`` would and run a zero input."""
    name = f"model {modality}"
    return guard(name, lambda: _check_model(name, modality, cfg))


def _check_model(name: str, modality: str, cfg: AppConfig) -> Check:
    import onnxruntime as ort

    from cdml_edge.model.runner import InferenceError, ModelOverrides, ModelRunner
    from cdml_edge.model.session import resolve_providers

    mc = cfg.models[modality]
    wanted = resolve_providers(mc.providers)
    available = ort.get_available_providers()
    missing = [p for p in wanted if p not in available]
    if missing:
        return Check(
            name,
            False,
            f"{mc.path.name}: provider {', '.join(missing)} not available in this "
            f"onnxruntime build (available: {', '.join(available)})",
        )
    try:
        runner = ModelRunner.load(mc.path, ModelOverrides.from_config(mc, modality))
    except InferenceError as exc:
        msg, dup = str(exc), f"{mc.path}: "
        while msg.startswith(dup + dup):
            msg = msg[len(dup) :]
        return Check(name, False, msg)
    spec = runner.spec
    want = str(mc.modality or modality)
    if not model_fits(spec.modality, want):
        return Check(name, False, f"{mc.path}: a {spec.modality} model configured for {want}")
    active = runner.session.get_providers()
    if not active or active[0] != wanted[0]:
        return Check(
            name,
            False,
            f"{mc.path.name}: asked for {wanted[0]} but onnxruntime runs it on {', '.join(active)}",
        )
    try:
        ms = runner.warm_up()
    except InferenceError as exc:
        return Check(name, False, f"inference on a zero input failed: {exc}")
    shape = "x".join(str(d) for d in (1, *spec.input.shape()))
    kind = "" if runner.kind == "spec" else f"{runner.kind}, "
    dtype = "" if spec.input.dtype == "float32" else f" {spec.input.dtype}"
    return Check(
        name,
        True,
        f"{spec.name} {spec.version} ({kind}{mc.path.name}) ran a {shape}{dtype} "
        f"zero input on {active[0]} in {ms:.1f} ms; "
        f"{runner.settings.summary()}",
    )
