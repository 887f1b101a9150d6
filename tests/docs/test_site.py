"""The documentation site builds without a warning, and the README stays a short front page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers.docs_pages import DOCS, README, ROOT


def test_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "index.html").read_text().count(
        "CDMLStreamDataset"
    ) > 3, "the API reference was not generated from the docstrings"


def test_readme_is_short_and_links_every_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    assert "make demo" in text and "make test" in text
    linked = set(re.findall(r"\]\(docs/([\w-]+)\.md[)#]", text))
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert pages == linked, f"pages not linked from the README: {pages - linked}"


def test_every_page_is_in_the_site_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for p in DOCS.glob("*.md"):
        assert f" {p.name}\n" in nav, f"{p.name} is not in mkdocs.yml's nav"
