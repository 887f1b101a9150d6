"""A systemd unit file and its drop-ins, read as ``Key=value`` settings."""

from __future__ import annotations

from pathlib import Path


def dropins(unit: Path) -> list[Path]:
    """The unit's drop-ins (``<unit>.d/*.conf``), in the order systemd reads them."""
    folder = unit.parent / f"{unit.name}.d"
    try:
        return sorted(folder.glob("*.conf")) if folder.is_dir() else []
    except OSError:
        return []


def _unit_texts(unit: Path) -> list[str]:
    texts = [p.read_text(encoding="utf-8") for p in [unit, *dropins(unit)]]
    return [t.replace("\\\n", " ") for t in texts]  # continuation lines


def unit_settings(unit: Path) -> dict[str, list[str]]:
    """Every ``Key=value`` of the unit and its drop-ins, in order (an empty value resets)."""
    out: dict[str, list[str]] = {}
    for text in _unit_texts(unit):
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line[0] in "#;[" or "=" not in line:
                continue
            key, value = (s.strip() for s in line.split("=", 1))
            if value == "":
                out[key] = []
            else:
                out.setdefault(key, []).append(value)
    return out
