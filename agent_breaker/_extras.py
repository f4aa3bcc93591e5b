"""Optional dependencies: a feature whose extra is not installed says which one to install."""

from __future__ import annotations

import importlib.util
import os

from ._about import DISTRIBUTION
from ._errors import ConfigError


def install_hint(extra: str) -> str:
    return f'pip install "{DISTRIBUTION}[{extra}]"'


class MissingExtra(ConfigError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""


def require(module: str, extra: str, feature: str) -> None:
    """Raise MissingExtra naming `extra` when `module` cannot be imported."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken one
        found = False
    if not found:
        raise MissingExtra(f"{feature} needs {module!r}, which is not installed: {install_hint(extra)}")


#: NeMo Guardrails' own switch for its usage statistics ("1" or "true": off)
NEMO_USAGE_STATS_ENV = "NEMO_GUARDRAILS_NO_USAGE_STATS"


def no_nemo_usage_stats() -> None:
    """NeMo records usage statistics (a `startup` event in ~/.config/nemoguardrails, reported to
    NVIDIA) in every process that builds its rails unless told not to. Off in the processes we
    start, and in their children; a user who wants them sets NeMo's switch to 0."""
    os.environ.setdefault(NEMO_USAGE_STATS_ENV, "1")
