"""The documentation the tests hold to the code: README.md and the pages of docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_files() -> list[Path]:
    """README.md, then every docs/ page in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page(name: str) -> Path:
    """One docs/ page by name (``cli`` -> ``docs/cli.md``)."""
    return DOCS / f"{name}.md"


def where(path: Path) -> str:
    """A page's name as a message shows it (``docs/cli.md``)."""
    return str(path.relative_to(ROOT))
