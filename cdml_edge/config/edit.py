"""Write one value back into ``factory.yaml``, keeping its comments and layout where it can.

:func:`set_model_key` sets ``models.<name>.<key>``: the line of the key is replaced, or a
line is added under the model's block; the edited text must parse to the original document
with only that value changed, else the whole document is written anew (comments lost, said
so). The file is replaced atomically.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from cdml_edge.config.bounded import parse_yaml, read_text
from cdml_edge.fsio import atomic_write


def _edited_text(text: str, name: str, key: str, value: str) -> str | None:
    """``text`` with ``models.<name>.<key>`` set.

    ``None`` when its block is not found in block style.
    """
    lines = text.splitlines(keepends=True)
    top = next((i for i, ln in enumerate(lines) if re.match(r"^models:\s*(#.*)?$", ln)), None)
    if top is None:
        return None
    head = None
    for i in range(top + 1, len(lines)):
        if re.match(r"^\S", lines[i]):
            break
        m = re.match(rf"^(\s+){re.escape(name)}:\s*(#.*)?$", lines[i])
        if m:
            head = (i, len(m.group(1)))
            break
    if head is None:
        return None
    start, indent = head
    inner = None
    end = start + 1
    while end < len(lines):
        ln = lines[end]
        if ln.strip() and not ln.lstrip().startswith("#"):
            depth = len(ln) - len(ln.lstrip())
            if depth <= indent:
                break
            inner = depth if inner is None else inner
            if depth == inner and re.match(rf"^\s+{re.escape(key)}:", ln):
                lines[end] = f"{' ' * depth}{key}: {value}\n"
                return "".join(lines)
        end += 1
    pad = " " * (inner if inner is not None else indent + 2)
    lines.insert(start + 1, f"{pad}{key}: {value}\n")
    return "".join(lines)


def set_model_key(path: Path, name: str, key: str, value: float) -> bool:
    """Set ``models.<name>.<key>`` in the YAML file ``path``.

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
