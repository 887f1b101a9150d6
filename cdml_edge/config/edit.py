"""Write one value back into ``factory.yaml``, keeping its comments and layout.

:func:`set_model_key` sets ``models.<name>.<key>`` by editing the text of the one value, at
the place the YAML parser found it: an existing value is replaced where it stands; a new key
goes before the closing ``}`` of a flow mapping (``{path: a.onnx}``) or on a line of its own
above the first key of a block mapping. A model written as an alias of another
(``line_b: *base``) is the anchored mapping itself: it becomes a mapping that merges the
anchor (``line_b: {<<: *base, anomaly_threshold: 0.7}``), so the anchor and its other aliases
keep their value; a value that is an alias is replaced where the alias stands. The edited
text must parse to the original document with only that value changed, else the whole
document is written anew (comments lost, said so). The file is replaced atomically; a
configuration that is a symbolic link stays one: the file it leads to is replaced, keeping
its mode.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml

from cdml_edge.config.bounded import ConfigReadError, parse_yaml, read_text
from cdml_edge.fsio import atomic_write


def _child(node: yaml.Node | None, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The ``(key node, value node)`` of ``key`` in a mapping node."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


_ALIAS_AFTER_KEY = re.compile(r"\s*:\s*(\*[^\s,\[\]{}]+)")
"""The ``: *name`` after a key whose value is an alias."""


def _written_at(text: str, key: yaml.Node, value: yaml.Node) -> tuple[int, int, bool] | None:
    """Where the value of ``key`` is written: ``(start, end, is an alias)``.

    An alias's node is the anchored node, written before the key: then the span is the
    ``*name`` after the key (``None`` when it is not found there).
    """
    if value.start_mark.index >= key.end_mark.index:
        return value.start_mark.index, value.end_mark.index, False
    match = _ALIAS_AFTER_KEY.match(text, key.end_mark.index)
    return (match.start(1), match.end(1), True) if match else None


def _edited_text(text: str, name: str, key: str, value: str) -> str | None:
    """``text`` with ``models.<name>.<key>`` set; ``None`` when the model's mapping is not found."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return None
    models = _child(root, "models")
    model = _child(models[1], name) if models else None
    if model is None or not isinstance(model[1], yaml.MappingNode):
        return None
    at = _written_at(text, *model)
    if at is None:
        return None
    if at[2]:  # line_b: *base -> line_b: {<<: *base, key: value}; the anchor is left alone
        start, end = at[0], at[1]
        return text[:start] + f"{{<<: {text[start:end]}, {key}: {value}}}" + text[end:]
    mapping = model[1]
    found = _child(mapping, key)
    if found is not None:  # replace the value where it stands (an alias: the alias)
        where = _written_at(text, *found)
        if where is None:
            return None
        return text[: where[0]] + value + text[where[1] :]
    if mapping.flow_style:  # before the closing brace: {path: a.onnx, key: value}
        close = mapping.end_mark.index - 1
        sep = ", " if mapping.value else ""
        return text[:close].rstrip() + f"{sep}{key}: {value}" + text[close:]
    if not mapping.value:
        return None
    first = mapping.value[0][0].start_mark  # block: a line of its own above the first key
    line_start = first.index - first.column
    return text[:line_start] + f"{' ' * first.column}{key}: {value}\n" + text[line_start:]


def set_model_key(path: Path, name: str, key: str, value: float) -> bool:
    """Set ``models.<name>.<key>`` in the YAML file ``path``, written as ``repr(value)``.

    ``True`` when comments and layout were kept, ``False`` when the document had to be
    written anew. A link is followed: the file it leads to is replaced, the link stays.
    """
    target = Path(os.path.realpath(path))
    text = read_text(target)  # within the bounds load_config reads it with
    doc: Any = parse_yaml(text) or {}
    want = copy.deepcopy(doc)  # the model's mapping copied: an alias shares its anchor's
    models = want["models"] = dict(want.get("models") or {})
    models[name] = {**(models.get(name) or {}), key: value}
    edited = _edited_text(text, name, key, repr(float(value)))
    try:
        kept = edited is not None and parse_yaml(edited) == want
    except (yaml.YAMLError, ConfigReadError):  # an edit that broke the YAML: not kept
        kept = False
    out = edited if kept and edited is not None else yaml.safe_dump(want, sort_keys=False)
    atomic_write(target, out.encode("utf-8"), mode=target.stat().st_mode & 0o777)
    return kept


__all__ = ["set_model_key"]
