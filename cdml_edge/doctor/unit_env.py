r"""The environment the unit's ``EnvironmentFile=`` gives the service, read as systemd reads it.

The shipped unit reads ``EnvironmentFile=-/etc/cdml-edge/environment`` (site values such as
``MQTT_URL=``, ``CAM_B_URL=``, a password for ``mqtt.password_env``). The doctor checks a
configuration with those variables applied (:func:`unit_environment`, :func:`applied`), so
that its verdict is the service's, and says which file it read.

The file is parsed by the rules of systemd's ``env-file.c`` (``systemd.exec(5)``,
``EnvironmentFile=``):

* one ``KEY=VALUE`` a line; blanks around the key and before the value are dropped, and
  after an unquoted value; blank lines, lines without ``=``, and lines whose first non-blank
  is ``#`` or ``;`` are skipped. A ``#`` later in a line is part of the value;
* an unquoted value takes ``\x`` as ``x``, and a backslash at the end of a line joins
  the next one; quotes after its first character are kept as they are;
* ``'...'`` keeps everything up to the next ``'``, newlines included; ``"..."`` too, and
  there ``\"``, ``\\``, ``\$`` and ``\``` stand for the character, a backslash before a
  newline joins the lines, any other backslash stays; text right after a closing quote is
  joined to the value (``A='x'"y"z`` is ``xyz``);
* a name that is not a variable name (``export A``, ``1X``, ``A-B``) is skipped: the
  service never sees it; a later assignment of a name wins;
* a file that is not UTF-8 or holds a NUL byte is refused whole (skipped with ``-``, else
  the service does not start);
* before systemd 254, a comment ending in a backslash went on over the next line
  (``comment_continues``; Debian 12 has 252, Ubuntu 22.04 249). No ``${VAR}`` or
  specifier is expanded in the file.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cdml_edge.doctor.check import Check
from cdml_edge.errors import CdmlError

_WHITESPACE = " \t\n\r"
_NEWLINE = "\n\r"
_SHELL_NEED_ESCAPE = '"\\`$'
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BAD_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape made of a byte not UTF-8
CHECK_NAME = "unit environment"


class EnvironmentFileError(CdmlError):
    """A file systemd refuses as a whole: not UTF-8, or a NUL byte in it."""


@dataclass(frozen=True)
class EnvironmentFile:
    """What one environment file gives the service.

    ``values``: the variables, as the service gets them; ``ignored``: ``(line, name)`` of
    each assignment whose name is not a variable name (skipped by systemd).
    """

    values: dict[str, str] = field(default_factory=dict)
    ignored: list[tuple[int, str]] = field(default_factory=list)


def _assignments(text: str, comment_continues: bool) -> list[tuple[int, str, str]]:
    """``(line, key, value)`` of each assignment in ``text``, in order.

    Long: systemd's state machine (``parse_env_file_internal``) state by state, so that
    the two can be read side by side.
    """
    out: list[tuple[int, str, str]] = []
    state, line, key_line = "pre_key", 1, 1
    key: list[str] = []
    value: list[str] = []
    key_blank = value_blank = -1  # where trailing blanks start (-1: none)

    def push(chomp: bool) -> None:
        k = key[:key_blank] if key_blank >= 0 else key
        v = value[:value_blank] if chomp and value_blank >= 0 else value
        out.append((key_line, "".join(k), "".join(v)))
        key.clear()
        value.clear()

    for c in text:
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif c not in _WHITESPACE:
                state, key_blank, key_line = "key", -1, line
                key.append(c)
        elif state == "key":
            if c in _NEWLINE:
                state = "pre_key"
                key.clear()
            elif c == "=":
                state, value_blank = "pre_value", -1
            else:
                if c not in _WHITESPACE:
                    key_blank = -1
                elif key_blank < 0:
                    key_blank = len(key)
                key.append(c)
        elif state == "pre_value":
            if c in _NEWLINE:
                state = "pre_key"
                push(chomp=False)
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\":
                state = "value_escape"
            elif c not in _WHITESPACE:
                state = "value"
                value.append(c)
        elif state == "value":
            if c in _NEWLINE:
                state = "pre_key"
                push(chomp=True)
            elif c == "\\":
                state, value_blank = "value_escape", -1
            else:
                if c not in _WHITESPACE:
                    value_blank = -1
                elif value_blank < 0:
                    value_blank = len(value)
                value.append(c)
        elif state == "value_escape":
            state = "value"
            if c not in _NEWLINE:
                value.append(c)
        elif state == "single":
            if c == "'":
                state = "pre_value"
            else:
                value.append(c)
        elif state == "double":
            if c == '"':
                state = "pre_value"
            elif c == "\\":
                state = "double_escape"
            else:
                value.append(c)
        elif state == "double_escape":
            state = "double"
            if c in _SHELL_NEED_ESCAPE:
                value.append(c)
            elif c != "\n":
                value += ["\\", c]
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c in _NEWLINE:
                state = "pre_key"
        else:  # comment_escape: a newline ends the comment since systemd 254
            state = "pre_key" if c in _NEWLINE and not comment_continues else "comment"
        if c == "\n":
            line += 1
    if state not in ("pre_key", "key", "comment", "comment_escape"):
        push(chomp=state == "value")
    return out


def parse_environment(text: str, *, comment_continues: bool = False) -> EnvironmentFile:
    """The variables of an environment file's text (see the module for the rules).

    ``text`` as decoded with ``surrogateescape``: a byte that is not UTF-8 raises
    :class:`EnvironmentFileError` naming its line, as systemd refuses such a file.
    """
    if "\0" in text:
        raise EnvironmentFileError("holds a NUL byte")
    out = EnvironmentFile()
    for line, key, value in _assignments(text, comment_continues):
        if _BAD_BYTE.search(key) or _BAD_BYTE.search(value):
            raise EnvironmentFileError(f"not UTF-8 (line {line})")
        if _NAME.fullmatch(key):
            out.values[key] = value
        else:
            out.ignored.append((line, key))
    return out


def read_environment_file(path: Path, *, comment_continues: bool = False) -> EnvironmentFile:
    """The variables ``path`` gives the service; ``OSError`` when it cannot be read.

    :class:`EnvironmentFileError` (naming ``path``) when systemd would refuse it.
    """
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    try:
        return parse_environment(text, comment_continues=comment_continues)
    except EnvironmentFileError as exc:
        raise EnvironmentFileError(f"{path}: {exc}") from None


def systemd_version() -> int | None:
    """The version of this machine's systemd (``systemctl --version``), None without it."""
    try:
        res = subprocess.run(
            ["systemctl", "--version"], capture_output=True, text=True, timeout=10, check=False
        )
        match = re.match(r"systemd (\d+)", res.stdout)
    except (OSError, subprocess.SubprocessError):
        return None
    return int(match.group(1)) if match else None


@dataclass
class _Reading:
    """The outcome of a unit's ``EnvironmentFile=`` settings, file by file."""

    values: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warn: bool = False
    fail: bool = False

    def note(self, text: str, *, warn: bool = False, fail: bool = False) -> None:
        self.notes.append(text)
        self.warn |= warn
        self.fail |= fail


def _read_one(spec: str, reading: _Reading, comment_continues: bool) -> None:
    """Apply one ``EnvironmentFile=`` setting (``spec``, as written) to ``reading``."""
    optional = spec.startswith("-")
    pattern = spec[1:] if optional else spec
    pattern = pattern.replace("%%", "%")
    where = f"EnvironmentFile={spec}"
    if not os.path.isabs(pattern):
        reading.note(f"{where}: not an absolute path: systemd ignores the setting", warn=True)
        return
    paths = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
    if not paths or not all(os.path.lexists(p) for p in paths):
        if optional:
            reading.note(f"{where}: absent (optional: the service starts without it)", warn=True)
        else:
            reading.note(
                f"{where}: absent: systemd will not start the service without it", fail=True
            )
        return
    for path in paths:
        label = where if path == pattern else f"{where} ({path})"
        try:
            found = read_environment_file(Path(path), comment_continues=comment_continues)
        except EnvironmentFileError as exc:
            why = str(exc).removeprefix(f"{path}: ")
            if optional:
                reading.note(f"{label}: {why}: systemd skips the file", warn=True)
            else:
                reading.note(f"{label}: {why}: systemd will not start the service", fail=True)
            continue
        except OSError as exc:
            reading.note(
                f"{label}: cannot read it here ({exc.strerror or exc}): the checks ran without "
                "its variables (systemd reads it as root)",
                warn=True,
            )
            continue
        reading.values.update(found.values)
        names = ", ".join(sorted(found.values))
        n = len(found.values)
        text = f"{label}: read, " + (
            f"{n} variable{'s' if n != 1 else ''} applied ({names})"
            if n
            else "no variables applied"
        )
        if found.ignored:
            skipped = ", ".join(f"line {line} {name!r}" for line, name in found.ignored)
            text += f"; skipped by systemd: {skipped} (not variable names)"
        reading.note(text, warn=bool(found.ignored))


def unit_environment(unit: Path) -> tuple[dict[str, str], Check | None]:
    """The variables the unit's ``EnvironmentFile=`` settings give the service, and a check.

    Files are read in order, a later value winning; an empty ``EnvironmentFile=`` resets the
    list (in the unit or a drop-in). The check (None when the unit has no such setting)
    names each file: read (with the names it sets, never the values), absent (a warning
    for ``-``, else a failure: the service would not start), unreadable here (a warning),
    or refused by systemd. Never raises: a unit that cannot be read is a failed check.
    """
    from cdml_edge.doctor.unit_file import unit_settings

    try:
        specs = unit_settings(unit).get("EnvironmentFile", [])
    except (OSError, UnicodeDecodeError) as exc:
        return {}, Check(CHECK_NAME, False, f"{unit}: cannot read the unit: {exc}")
    if not specs:
        return {}, None
    version = systemd_version()
    reading = _Reading()
    for spec in specs:
        _read_one(spec, reading, comment_continues=version is not None and version < 254)
    detail = f"{unit}: " + "; ".join(reading.notes)
    if reading.fail:
        return reading.values, Check(CHECK_NAME, False, detail)
    return reading.values, Check(CHECK_NAME, True, detail, warn=reading.warn)


@contextmanager
def applied(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set over it, given back as it was on the way out.

    The doctor's checks read the environment where the agent does (``${VAR}`` in the
    configuration, ``mqtt.password_env``, size bounds read from variables), so it is set
    for them all, as the service gets it: a file's value wins over this process's.
    """
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in before.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
