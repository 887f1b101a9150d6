"""Write one value back into ``factory.yaml``, keeping its comments and layout.

:func:`set_model_key` sets ``models.<name>.<key>`` by editing the text of the one value, at
the place the YAML parser found it: an existing value is replaced where it stands; a new key
goes before the closing ``}`` of a flow mapping (``{path: a.onnx}``) or on a line of its own
above the first key of a block mapping. The edited text must parse to the original document
with only that value changed, else the whole document is written anew (comments lost, said
so). The file is replaced atomically.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from cdml_edge.config.bounded import parse_yaml, read_text
from cdml_edge.fsio import atomic_write


def _child(node: yaml.Node | None, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The ``(key node, value node)`` of ``key`` in a mapping node."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


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
    mapping = model[1]
    found = _child(mapping, key)
    if found is not None:  # replace the value where it stands
        start, end = found[1].start_mark.index, found[1].end_mark.index
        return text[:start] + value + text[end:]
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
    written anew.
    """
    text = read_text(path)  # within the bounds load_config reads it with
    doc: Any = parse_yaml(text) or {}
    want = copy.deepcopy(doc)
    want.setdefault("models", {}).setdefault(name, {})[key] = value
    edited = _edited_text(text, name, key, repr(float(value)))
    kept = edited is not None and parse_yaml(edited) == want
    out = edited if kept and edited is not None else yaml.safe_dump(want, sort_keys=False)
    atomic_write(path, out.encode("utf-8"), mode=path.stat().st_mode & 0o777)
    return kept


__all__ = ["set_model_key"]
