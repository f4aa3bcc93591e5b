"""A release tag is checked before anything is built (.ci/release-check, run by
.github/workflows/release.yml): the tag is the package's version, and the changelog has its
section with nothing left under Unreleased."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / ".ci" / "release-check"


def release_check():
    loader = importlib.machinery.SourceFileLoader("release_check", str(CHECK))
    spec = importlib.util.spec_from_loader("release_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def version() -> str:
    return re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def test_a_tag_with_the_version_and_its_changelog_section_passes(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "CHANGELOG.md").write_text(f"# Changelog\n\n## Unreleased\n\n## [{version()}] - 2026-12-03\n\n### Added\n- x\n")
    assert release_check().problems(f"v{version()}", tmp_path) == []


def test_a_tag_that_is_not_the_version_or_a_changelog_without_it_fails(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n\n## Unreleased\n\n### Added\n- a change\n")
    found = release_check().problems("v9.9.9", tmp_path)
    assert len(found) == 3
    assert "v9.9.9" in found[0] and f"no section for {version()}" in found[1] and "Unreleased" in found[2]


def test_the_release_workflow_checks_builds_and_installs_before_it_publishes():
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    steps = [".ci/release-check", "python3 -m build", "twine check --strict", "release-venv/bin/agent-breaker demo"]
    positions = [workflow.index(step) for step in steps]
    assert positions == sorted(positions) and positions[-1] < workflow.index("pypa/gh-action-pypi-publish")
    assert "id-token: write" in workflow  # trusted publishing: no token stored anywhere
