"""The habits that keep the code easy to change. Ruff (lint and format) and mypy (with the
pydantic plugin) run as their own steps of the README's test command (and .ci/run), before the
suite; what is checked here is what they cannot see."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_says_it_is_typed():
    assert (ROOT / "agent_breaker" / "py.typed").is_file()
    assert shutil.which(sys.executable)
