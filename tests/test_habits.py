"""The habits that keep the code easy to change: ruff (lint and format) and mypy (with the
pydantic plugin) are clean. They run with the suite, so .ci/run checks them too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("command", [("ruff", "check", "."), ("ruff", "format", "--check", ".")], ids=["lint", "format"])
def test_ruff_is_clean(command):
    pytest.importorskip("ruff")
    proc = run(*command)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean():
    pytest.importorskip("mypy")
    proc = run("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_package_says_it_is_typed():
    assert (ROOT / "agent_breaker" / "py.typed").is_file()
    assert shutil.which(sys.executable)
