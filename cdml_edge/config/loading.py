"""Reading ``factory.yaml``: environment substitution, validation and readable errors.

:func:`load_config` raises :class:`ConfigError`, whose message names the file, the field path
and the problem, e.g. ``factory.yaml: sources[1].window.seconds: must be greater than 0``.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from cdml_edge.config.bare_vars import bare_variables
from cdml_edge.config.bounded import ConfigReadError, DuplicateKeys, parse_yaml, read_text
from cdml_edge.config.schema import TOPIC_SAFE, AppConfig, is_model_class
from cdml_edge.errors import CdmlError


class ConfigError(CdmlError):
    """A configuration file that cannot be used; ``problems`` holds ``(field path, message)``."""

    def __init__(self, file: str, problems: list[tuple[str, str]]) -> None:
        self.file = file
        self.problems = problems
        lines = [f"{file}: {path}: {msg}" if path else f"{file}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines))


_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:[^{}]|\{[^{}]*\})*))?\}")
"""``${VAR}`` or ``${VAR:-default}``; a default may hold one ``${OTHER:-...}`` level itself."""


def substitute_env(
    value: Any,
    env: Mapping[str, str] | None = None,
    path: str = "",
    unset: list[tuple[str, str]] | None = None,
) -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed YAML tree.

    As in the shell, the default stands in for a variable that is unset or empty, and may
    itself name a variable (``${CAM_HOST:-${SITE_GATEWAY}}``); a value taken from the
    environment is not substituted again.
    A variable that is unset and has no default raises ``KeyError`` with the field path;
    with ``unset`` given, it is recorded there as ``(field path, problem)`` instead, left
    as written, and substitution goes on (so every other problem can be reported too).
    """
    env = os.environ if env is None else env
    if isinstance(value, str):

        def repl(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if env.get(name) or (name in env and default is None):
                return env[name]
            if default is not None:
                return _ENV_PATTERN.sub(repl, default)
            if unset is None:
                raise KeyError(f"{path}: environment variable {name} is not set")
            unset.append((path, f"environment variable {name} is not set"))
            return match.group(0)

        return _ENV_PATTERN.sub(repl, value)
    if isinstance(value, list):
        return [substitute_env(v, env, f"{path}[{i}]", unset) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {
            k: substitute_env(v, env, f"{path}.{k}" if path else str(k), unset)
            for k, v in value.items()
        }
    return value


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the field at ``loc`` (to list allowed keys)."""
    model: Any = AppConfig
    map_key_next = False
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        if map_key_next:  # the key of a mapping such as models.<modality>
            map_key_next = False
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        map_key_next = getattr(field.annotation, "__origin__", None) is dict
        model = _inner_model(field.annotation)
    return model if is_model_class(model) else None


def _inner_model(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if is_model_class(annotation):
        return annotation
    if args:
        for arg in args:
            found = _inner_model(arg)
            if found is not None:
                return found
    return None


def _pattern_problem(value: object) -> str:
    """Why a name used as an MQTT topic level is refused, naming the first bad character."""
    rule = (
        "must be letters, digits, '_', '.' or '-', starting with a letter or digit "
        "(it is an MQTT topic level)"
    )
    if not isinstance(value, str):
        return rule
    if not value:
        return f"{rule}; it is empty"
    if not re.fullmatch(r"[A-Za-z0-9]", value[0]):
        return f"{rule}; {value!r} starts with {value[0]!r}"
    bad = next((ch for ch in value if not re.fullmatch(r"[A-Za-z0-9_.-]", ch)), None)
    return f"{rule}; {value!r} holds {bad!r}" if bad else rule


def _humanise(error: Any) -> tuple[str, str]:
    loc = tuple(error["loc"])
    kind = error["type"]
    msg = str(error["msg"])
    if kind == "extra_forbidden":
        key = str(loc[-1])
        parent = _model_at(loc[:-1])
        hint = ""
        if parent is not None:
            allowed = list(parent.model_fields)
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = (
                f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"
            )
        return _field_path(loc), f"unknown key{hint}"
    if kind == "missing":
        return _field_path(loc), "is required"
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        # model-level checks name their own field first: "level: zip levels go from 0 to 9"
        match = re.match(r"^([a-z_][a-z0-9_.\[\]-]*): (.*)$", msg)
        if match:
            base = _field_path(loc)
            return (f"{base}.{match.group(1)}" if base else match.group(1)), match.group(2)
        return _field_path(loc), msg
    if kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == TOPIC_SAFE:
        return _field_path(loc), _pattern_problem(error.get("input"))
    if kind == "string_type" and isinstance(error.get("input"), (bool, int, float)):
        given = error["input"]
        why = "a boolean" if isinstance(given, bool) else "a number"
        return _field_path(loc), (
            f"must be a string; YAML read this value as {why} ({given!r}): quote it"
            + (" (unquoted yes/no/on/off/true/false are booleans)" if why == "a boolean" else "")
        )
    msg = re.sub(r"^Input should be ", "must be ", msg)
    msg = re.sub(r"^Input ", "value ", msg)
    if loc and loc[-1] == "[key]":
        return _field_path(loc[:-1]), f"not an allowed key: {msg}"
    return _field_path(loc), msg


def parse_config(
    data: Any,
    file: str = "<config>",
    base_dir: Path | None = None,
    *,
    state_directory: str | None = None,
) -> AppConfig:
    """Validate an already parsed mapping; errors are raised as :class:`ConfigError`.

    ``base_dir``: the folder relative paths resolve against (the config file's; without
    it they stay relative to the working directory). ``state_directory``: what
    ``$STATE_DIRECTORY`` would say (the doctor reads it from the unit).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(file, [("", "the top level must be a mapping of sections")])
    unset = bare_variables(data)  # $HOME in a path: refused as an unset ${VAR} is
    data = substitute_env(data, unset=unset)  # reported with every other problem, not alone
    context: dict[str, Any] = {"state_directory": state_directory}
    if base_dir is not None:
        name = Path(file).name if file != "<config>" else None
        context.update(base_dir=base_dir, config_name=name)
    try:
        config = AppConfig.model_validate(data, context=context)
    except ValidationError as exc:
        problems = list(unset)
        seen = set(problems) | {path for path, _ in unset}  # no second error at those fields
        for error in exc.errors():
            problem = _humanise(error)
            if problem not in seen and problem[0] not in seen:
                seen.add(problem)
                problems.append(problem)
        raise ConfigError(file, problems) from None
    if unset:
        raise ConfigError(file, unset)
    return config


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """Where and why ``text`` is not YAML; a tab where indentation is read says so."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        lines = text.splitlines()
        line = lines[mark.line] if mark.line < len(lines) else ""
        indent = line[: len(line) - len(line.lstrip())]
        if "\t" in indent or line[mark.column : mark.column + 1] == "\t":
            problem += " (a tab: YAML indents with spaces only)"
    return f"{where}invalid YAML: {problem}"


def load_config(path: str | os.PathLike[str], *, state_directory: str | None = None) -> AppConfig:
    """Read and validate a YAML configuration file.

    Read within bounds (:mod:`cdml_edge.config.bounded`): a regular file of at most 256 KiB
    whose aliases expand to at most 100,000 nodes. Relative paths resolve against its folder
    (``state_directory``: see :func:`parse_config`).
    """
    file = Path(path)
    label = str(path)
    try:
        text = read_text(file)
    except OSError as exc:
        raise ConfigError(label, [("", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(label, [("", f"not UTF-8 text (byte {exc.start})")]) from None
    except ConfigReadError as exc:
        raise ConfigError(label, [("", f"not read: {exc}")]) from None
    try:
        data = parse_yaml(text)
    except DuplicateKeys as exc:
        raise ConfigError(label, exc.problems) from None
    except ConfigReadError as exc:
        raise ConfigError(label, [("", f"not read: {exc}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(label, [("", _yaml_problem(exc, text))]) from None
    return parse_config(
        data, label, base_dir=file.resolve().parent, state_directory=state_directory
    )


def config_schema() -> dict[str, Any]:
    """The JSON Schema of ``factory.yaml`` (for editors and docs)."""
    schema = AppConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "cdml-edge configuration"
    return schema
