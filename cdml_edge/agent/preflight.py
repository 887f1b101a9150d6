"""Whether a valid configuration can run here: the checks beyond the syntax.

What ``config validate`` and ``run`` check beyond the syntax, so that a mistake is exit
status 2 before start, not a crash after it.

* the files it names exist and are readable (:func:`cdml_edge.config.checks.file_problems`);
* each model fits the modality it is configured for (``models.image`` holding a CSV model
  would score camera frames as tables);
* ``limits.max_inflight_bytes`` holds one item of every configured model: an item is
  charged ``DATA_COPIES`` copies of its bytes plus three model inputs and its records
  (:func:`~cdml_edge.agent.runners.window_charges`), so a budget below that admits no file
  at all and every file would be refused as too large.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cdml_edge.agent.runners import DATA_COPIES, window_charges
from cdml_edge.config import AppConfig, ConfigError, load_config
from cdml_edge.config.checks import file_problems, named_files
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.modality import model_fits
from cdml_edge.model.runner import InferenceError, ModelOverrides, ModelRunner
from cdml_edge.units import format_size
from cdml_edge.window.examples import ExamplesError, example_files


def unscored_warning(cfg: AppConfig) -> str | None:
    """A warning naming the sources no model scores (their results say ``model: none``)."""
    unscored = [f"{s.name} ({s.modality})" for s in cfg.sources if not cfg.models_of(s)]
    if not unscored:
        return None
    many = len(unscored) > 1
    return (
        f"no model scores source{'s' if many else ''} {', '.join(unscored)}: "
        f'{"their" if many else "its"} results carry "model": "none" (data collection, '
        "e.g. for retention); add a model of that modality under models to score them"
    )


def model_problems(cfg: AppConfig, runners: Mapping[str, ModelRunner]) -> list[tuple[str, str]]:
    """Models configured for a modality they do not take, and a budget too small for a model.

    Too small: it holds no item of the model. ``runners``: loaded with the configuration's
    overrides.
    """
    out: list[tuple[str, str]] = []
    for key, runner in runners.items():
        got = runner.spec.modality
        mc = cfg.models.get(key)
        want = str(mc.modality) if mc is not None and mc.modality else key
        if not model_fits(got, want):
            users = [s.name for s in cfg.sources if key in cfg.models_of(s)]
            who = f" (sources {', '.join(users)})" if users else ""
            name = mc.path.name if mc is not None else runner.name
            out.append(
                (
                    f"models.{key}.path",
                    f"{name} is a {got} model; {want} items{who} need a model of modality {want}",
                )
            )
        if runner.kind == "anomaly" and runner.spec.anomaly_threshold is None:
            out.append(
                (
                    f"models.{key}.anomaly_threshold",
                    "not set: give one, or fit it with "
                    f"cdml-edge calibrate --model {key} FOLDER_OF_NORMAL_SAMPLES",
                )
            )
    budget = ByteBudget(cfg.limits.max_inflight_bytes, data_factor=DATA_COPIES)
    window_charges(budget, dict(runners))
    for key, extra in sorted(budget.item_extra.items()):
        if budget.max_bytes - extra < DATA_COPIES:
            need = extra + DATA_COPIES * 64 * 1024
            out.append(
                (
                    "limits.max_inflight_bytes",
                    (
                        f"{format_size(budget.max_bytes)} holds no {key} item: each is charged "
                        f"{format_size(extra)} for its model input and records before its own "
                        f"bytes (x{DATA_COPIES}); give at least {format_size(need)} "
                        "for 64 KiB files"
                    ),
                )
            )
    return out


def example_problems(cfg: AppConfig) -> list[tuple[str, str]]:
    """Example folders of embedding models that are missing or hold no file to learn from."""
    out: list[tuple[str, str]] = []
    for key, mc in cfg.models.items():
        for label, folder in (mc.output.examples if mc.output is not None else {}).items():
            try:
                example_files(folder, str(mc.modality))
            except ExamplesError as exc:
                out.append((f"models.{key}.output.examples.{label}", str(exc)))
    return out


def check_models(cfg: AppConfig, runners: Mapping[str, ModelRunner], file: str) -> None:
    """Raise :class:`ConfigError` naming every problem of :func:`model_problems`."""
    problems = model_problems(cfg, runners)
    if problems:
        raise ConfigError(file, problems)


def check_files(cfg: AppConfig, file: str) -> None:
    """Raise :class:`ConfigError` naming every file the configuration cannot use."""
    problems = file_problems(cfg)
    if problems:
        raise ConfigError(file, problems)


@dataclass(frozen=True)
class Validated:
    """A configuration that passed every check, and what the budget admits per modality."""

    config: AppConfig
    max_item_bytes: dict[str, int]


def validate_runnable(path: str | Path) -> Validated:
    """Load ``path`` and check everything ``run`` needs (models are loaded, not warmed up).

    :class:`ConfigError` lists every problem.
    """
    label = str(path)
    cfg = load_config(path)
    problems = file_problems(cfg)
    runners: dict[str, ModelRunner] = {}
    readable = {f for f, _ in problems}
    for key, mc in cfg.models.items():
        if {f"models.{key}.path", f"models.{key}.labels_file"} & readable:
            continue  # named once, as a file problem
        ov = ModelOverrides.from_config(mc, key)
        try:
            runners[key] = ModelRunner.load(mc.path, ov)
            runners[key].modality = str(mc.modality)
        except InferenceError as exc:
            problems.append((f"models.{key}.path", f"cannot be loaded: {exc}"))
    problems += model_problems(cfg, runners)
    problems += example_problems(cfg)
    if problems:
        raise ConfigError(label, problems)
    budget = ByteBudget(cfg.limits.max_inflight_bytes, data_factor=DATA_COPIES)
    window_charges(budget, runners)
    sizes = {k: budget.largest_file(k) for k in budget.item_extra}
    return Validated(cfg, sizes)


@dataclass(frozen=True)
class ValidatedElsewhere:
    """A configuration checked for another machine, and the checks that need that machine.

    ``skipped``: ``(field path, what was not checked)``, in the order of the file.
    """

    config: AppConfig
    skipped: list[tuple[str, str]]


def machine_checks(cfg: AppConfig) -> list[tuple[str, str]]:
    """The checks of :func:`validate_runnable` that need the machine the configuration is for.

    The files it names, the models they hold, the example folders and the environment.
    """
    out: list[tuple[str, str]] = []
    for field, path in named_files(cfg):
        what = "exists, readable"
        if field.startswith("models.") and field.endswith(".path"):
            modality = cfg.models[field.split(".")[1]].modality
            what = f"exists, loads, fits {modality} items, the budget holds one item"
        out.append((field, f"{path}: {what}"))
    for key, mc in cfg.models.items():
        for label, folder in (mc.output.examples if mc.output is not None else {}).items():
            out.append((f"models.{key}.output.examples.{label}", f"{folder}: holds examples"))
    mq = cfg.mqtt
    if mq is not None and mq.password_env is not None:
        out.append(("mqtt.password_env", f"environment variable {mq.password_env} is set"))
    return out


def validate_elsewhere(path: str | Path) -> ValidatedElsewhere:
    """Load ``path`` for another machine: its fields and cross-field rules, no file it names.

    Nothing named inside it is opened here (models, label files, certificates, example
    folders); :attr:`ValidatedElsewhere.skipped` says which checks that leaves to the
    machine. :class:`ConfigError` lists every problem of the file itself.
    """
    cfg = load_config(path)
    return ValidatedElsewhere(cfg, machine_checks(cfg))


__all__ = [
    "Validated",
    "ValidatedElsewhere",
    "check_files",
    "check_models",
    "example_problems",
    "machine_checks",
    "model_problems",
    "validate_elsewhere",
    "validate_runnable",
]
