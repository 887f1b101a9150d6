"""Reading a configuration file within bounds: a regular file, of a sane size, aliases capped.

A configuration is read by ``config validate``, at start and on every SIGHUP reload (in the
agent's main loop), so reading it must end quickly whatever the path holds: a FIFO, a device
(``/dev/zero``), a 42 MB file or a 342-byte YAML "billion laughs" whose aliases expand to
387 million strings are each refused with one clear message.

* :func:`read_text`: the path must be a regular file (links are followed: a configuration
  may be a link) of at most :data:`MAX_CONFIG_BYTES`; it is checked with ``stat`` before it is
  opened, opened without blocking (a FIFO cannot hang it) and checked again with ``fstat``.
* :func:`parse_yaml`: the document is composed (libyaml when present), its node graph is
  measured with aliases expanded, and it is constructed only when that stays within
  :data:`MAX_YAML_NODES`, holds no alias to itself and no mapping that names a key twice
  (YAML loaders keep the last silently: a second ``sources:`` would drop the first list).
"""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml

from cdml_edge.fsio.kinds import kind_of

MAX_CONFIG_BYTES = 256 * 1024
"""The largest configuration file read (a real one is a few KB; libyaml parses this much in
well under a second on a small board)."""
MAX_YAML_NODES = 100_000
"""The most YAML nodes a configuration may hold with its aliases expanded."""

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigReadError(ValueError):
    """The file cannot be read as a configuration; the message says why."""


class DuplicateKeys(ConfigReadError):
    """Mappings that name a key twice; ``problems`` holds ``(field path, message)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {msg}" for path, msg in problems))


def _check(st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ConfigReadError(f"not a regular file ({kind_of(st.st_mode)})")
    if st.st_size > MAX_CONFIG_BYTES:
        raise ConfigReadError(
            f"{st.st_size} bytes, over the limit of {MAX_CONFIG_BYTES} for a configuration file"
        )


def read_text(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of a configuration file, refused unless regular and small enough.

    Raises :class:`ConfigReadError`, ``OSError`` (cannot be opened) or ``UnicodeDecodeError``.
    """
    _check(os.stat(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        _check(os.fstat(fd))  # the file opened is the file checked
        chunks, left = [], MAX_CONFIG_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_CONFIG_BYTES:  # grew since it was checked
        raise ConfigReadError(f"over the limit of {MAX_CONFIG_BYTES} bytes for a configuration")
    return data.decode("utf-8")


def parse_yaml(text: str) -> Any:
    """The YAML document of ``text``, its aliases bounded (see the module).

    Raises ``yaml.YAMLError`` on invalid YAML, :class:`ConfigReadError` when the aliases
    expand too far or refer to themselves, or the nesting is too deep.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        count_nodes(node)
        if duplicates := duplicate_keys(node):
            raise DuplicateKeys(duplicates)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigReadError("nested too deeply to read") from None
    finally:
        loader.dispose()


def count_nodes(root: yaml.Node, limit: int = MAX_YAML_NODES) -> int:
    """Nodes under ``root`` with every alias expanded; refused over ``limit`` or when cyclic.

    Each distinct node is visited once (its expanded size remembered), so a billion laughs
    is measured in a few dozen steps.
    """
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_nodes.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            if size[key] > limit:
                raise ConfigReadError(
                    f"YAML aliases expand to more than {limit} nodes: refused (anchors and "
                    "aliases are fine, an expansion this large is not a configuration)"
                )
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise ConfigReadError("a YAML alias refers to the node that holds it")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)
    return size[id(root)]


def duplicate_keys(root: yaml.Node) -> list[tuple[str, str]]:
    """``(field path, problem)`` for each key a mapping under ``root`` names again.

    Each distinct node is looked at once (an alias is checked where its anchor is); the merge
    key ``<<`` is YAML's way of taking keys from elsewhere and is not a duplicate.
    """
    out: list[tuple[str, str]] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                here = f"{path}.{name}" if path else name
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    earlier = first.get((key.tag, name))
                    if earlier is None:
                        first[(key.tag, name)] = line
                    else:
                        out.append(
                            (
                                here,
                                f"duplicate key (line {line}; first at line {earlier}): "
                                "YAML would keep only the last one",
                            )
                        )
                stack.append((value, here))
    return sorted(out)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []
