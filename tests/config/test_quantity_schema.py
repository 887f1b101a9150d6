"""Sizes and durations: the exported JSON Schema accepts what the loader accepts, no more.

Each value is checked twice, through :func:`parse_config` (what ``cdml-edge run`` takes) and
through the schema of ``cdml-edge config schema`` (what an editor underlines), and the two
verdicts must be the same. The schema's patterns are also run by Node's ECMA-262 engine, the
regex dialect JSON Schema names and the YAML language server uses.

One difference stays, by nature: a pattern reads the syntax of a string, not its value, so
a well-formed string whose value is out of range (``"0"`` where more than 0 is needed,
``"1e30"`` bytes, ``"3651d"``) passes the schema and is refused by the loader, naming the
range. Numbers carry their bounds in the schema and agree in full.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import jsonschema
import pytest

from cdml_edge.config import ConfigError, config_schema, parse_config
from cdml_edge.config.schema import MAX_DURATION_S

VALIDATOR = jsonschema.Draft202012Validator(config_schema())

SIZES_ACCEPTED = [
    "4096",
    "512KiB",
    "64MiB",
    "64 MiB",
    " 64MiB ",
    "64\tMiB",
    "2GB",
    "1.5GiB",
    ".5GiB",
    "10k",
    "7b",
    "64mib",
    "64MIB",
    "3T",
    "1TiB",
    "1e3",
    "1E3",
    "1e+3",
    "2.5e2KiB",
    "1e3kB",
    "1.5",
]
SIZES_REFUSED = [
    "",
    " ",
    "MiB",
    "1.",
    ".",
    "1.2.3MB",
    "12 parsecs",
    "1 xb",
    "1MiBs",
    "1k b",
    "e3",
    "1e",
    "1e+",
    "1e3e",
    "-1",
    "+1",
    "1_000",
    "0x10",
    "1,5MB",
    "1 000",
    "inf",
    "nan",
    "64\xa0MiB",  # Python's \s and ECMA's \s both take it, but differ on others:
    "64\x1cMiB",  # Python's only
    "64\ufeffMiB",  # ECMA's only
    "\u0661\u0662",  # digits, but not ASCII ones
]
SIZES_OUT_OF_RANGE = ["0", "0MiB", "0.4", "1e-3", "1e30", "9223372036854775808"]

DURATIONS_ACCEPTED = [
    "2",
    "2s",
    "500ms",
    "5min",
    "5m",
    "1h",
    "7d",
    "1w",
    "250us",
    "1.5h",
    ".5s",
    " 2 s ",
    "2S",
    "500MS",
    "1e3ms",
    "1E-3",
    "3650d",
]
DURATIONS_REFUSED = [
    "",
    "soon",
    "5 fortnights",
    "2sec",
    "s",
    "1.",
    "2x",
    "-1s",
    "+1s",
    "1e",
    "1e3e",
    "2 s s",
    "2\xa0s",
    "1_000ms",
    "P1D",
    "1:00",
]
DURATIONS_OUT_OF_RANGE = ["0", "0s", "3651d", "1e400", "1e-400s"]


def _doc(field: str, value: object) -> dict[str, Any]:
    """A configuration setting ``field`` (``section.key``) to ``value``."""
    section, key = field.split(".")
    if section == "sources":
        return {"sources": [{"name": "cam", "path": "/data/cam", "modality": "image", key: value}]}
    return {section: {key: value}}


def _loader(field: str, value: object) -> str | None:
    """None when the loader takes ``value`` for ``field``, else its message."""
    try:
        parse_config(_doc(field, value), "factory.yaml")
    except ConfigError as exc:
        return str(exc)
    return None


def _schema_accepts(field: str, value: object) -> bool:
    return VALIDATOR.is_valid(_doc(field, value))


# Fields more than 0 (required and optional) and at least 0, of both kinds.
SIZE_FIELDS = ["spool.max_bytes", "limits.max_decoded_bytes", "limits.isolate_decodes_over"]
DURATION_FIELDS = ["health.interval", "retention.max_age", "sources.stable_seconds"]


@pytest.mark.parametrize("field", SIZE_FIELDS)
@pytest.mark.parametrize("text", SIZES_ACCEPTED + SIZES_REFUSED)
def test_size_strings_agree(field: str, text: str) -> None:
    loader = _loader(field, text)
    assert (loader is None) == (text in SIZES_ACCEPTED), loader
    assert _schema_accepts(field, text) == (loader is None), (field, text, loader)


@pytest.mark.parametrize("field", DURATION_FIELDS)
@pytest.mark.parametrize("text", DURATIONS_ACCEPTED + DURATIONS_REFUSED)
def test_duration_strings_agree(field: str, text: str) -> None:
    loader = _loader(field, text)
    assert (loader is None) == (text in DURATIONS_ACCEPTED), loader
    assert _schema_accepts(field, text) == (loader is None), (field, text, loader)


@pytest.mark.parametrize(
    ("field", "text"),
    [("spool.max_bytes", t) for t in SIZES_OUT_OF_RANGE]
    + [("health.interval", t) for t in DURATIONS_OUT_OF_RANGE],
)
def test_out_of_range_strings_pass_the_pattern_and_the_loader_names_the_range(
    field: str, text: str
) -> None:
    assert _schema_accepts(field, text)
    loader = _loader(field, text)
    assert loader is not None
    assert any(w in loader for w in ("greater than 0", "out of range", "longer than")), loader


@pytest.mark.parametrize(
    ("field", "value", "accepted"),
    [
        ("spool.max_bytes", 4096, True),
        ("spool.max_bytes", 1024.0, True),
        ("spool.max_bytes", 2**63 - 1, True),
        ("spool.max_bytes", 2**63, False),
        ("spool.max_bytes", 10**30, False),
        ("spool.max_bytes", 0, False),
        ("spool.max_bytes", -1, False),
        ("spool.max_bytes", 1.5, False),
        ("spool.max_bytes", True, False),
        ("spool.max_bytes", None, False),
        ("limits.max_decoded_bytes", 0, False),
        ("limits.max_decoded_bytes", None, True),
        ("limits.isolate_decodes_over", 0, True),
        ("limits.isolate_decodes_over", -1, False),
        ("health.interval", 2, True),
        ("health.interval", 0.5, True),
        ("health.interval", MAX_DURATION_S, True),
        ("health.interval", MAX_DURATION_S * 2, False),
        ("health.interval", 0, False),
        ("health.interval", -1, False),
        ("health.interval", False, False),
        ("retention.max_age", 0, False),
        ("retention.max_age", 60, True),
        ("retention.max_age", None, True),
        ("sources.stable_seconds", 0, True),
        ("sources.stable_seconds", -0.5, False),
    ],
)
def test_numbers_agree(field: str, value: object, accepted: bool) -> None:
    loader = _loader(field, value)
    assert (loader is None) == accepted, loader
    assert _schema_accepts(field, value) == accepted, (field, value)


def _string_patterns(node: object, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        if node.get("type") == "string" and "pattern" in node:
            out.add(node["pattern"])
        for v in node.values():
            _string_patterns(v, out)
    elif isinstance(node, list):
        for v in node:
            _string_patterns(v, out)
    return out


def test_the_patterns_read_the_same_in_ecma_262() -> None:
    """Node runs each quantity pattern (with and without the ``u`` flag) like Python does."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node not found: the ECMA-262 reading of the patterns is not checked")
    defs = config_schema()["$defs"]
    cases = {
        _one_pattern(defs["SpoolConfig"]["properties"]["max_bytes"]): (
            SIZES_ACCEPTED + SIZES_OUT_OF_RANGE,
            SIZES_REFUSED,
        ),
        _one_pattern(defs["HealthConfig"]["properties"]["interval"]): (
            DURATIONS_ACCEPTED + DURATIONS_OUT_OF_RANGE,
            DURATIONS_REFUSED,
        ),
    }
    script = (
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "const out = cases.map(([p, s]) => [new RegExp(p).test(s), new RegExp(p, 'u').test(s)]);"
        "process.stdout.write(JSON.stringify(out));"
    )
    pairs = [(p, s) for p, (yes, no) in cases.items() for s in yes + no]
    res = subprocess.run(
        [node, "-e", script], input=json.dumps(pairs), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    got = dict(zip(pairs, json.loads(res.stdout), strict=True))
    for pattern, (yes, no) in cases.items():
        for s in yes:
            assert got[(pattern, s)] == [True, True], (pattern, s)
        for s in no:
            assert got[(pattern, s)] == [False, False], (pattern, s)


def _one_pattern(prop: dict[str, Any]) -> str:
    (pattern,) = _string_patterns(prop, set())
    return pattern
