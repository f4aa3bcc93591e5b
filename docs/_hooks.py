"""MkDocs build hook: the README (the home page), CONTRIBUTING and CHANGELOG come from the
repository's root, their links made relative to docs/; the reference pages are generated from
the code (agent_breaker._reference)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from agent_breaker._reference import PAGES

#: root file -> its page on the site
ROOT_PAGES = {"README.md": "index.md", "CONTRIBUTING.md": "contributing.md", "CHANGELOG.md": "changelog.md"}


def _relinked(text: str) -> str:
    text = text.replace("](docs/", "](")
    for source, page in ROOT_PAGES.items():
        text = text.replace(f"]({source})", f"]({page})")
    return text


def on_files(files: Files, config: Any) -> Files:
    root = Path(config.config_file_path).parent
    for source, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, content=_relinked((root / source).read_text(encoding="utf-8"))))
    for name, render in PAGES.items():
        files.append(File.generated(config, f"reference/{name}.md", content=render()))
    return files
