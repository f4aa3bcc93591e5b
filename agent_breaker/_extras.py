"""Optional dependencies: a feature whose extra is not installed says which one to install."""

from __future__ import annotations

import importlib.util

#: the distribution's name on the package index (`agent-breaker` there is another project's); the
#: package it installs is `agent_breaker`, the command `agent-breaker`
DISTRIBUTION = "agent-breaker-rails"


def install_hint(extra: str) -> str:
    return f'pip install "{DISTRIBUTION}[{extra}]"'


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the pip extra."""


def require(module: str, extra: str, feature: str) -> None:
    """Raise MissingExtra naming `extra` when `module` cannot be imported."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken one
        found = False
    if not found:
        raise MissingExtra(f"{feature} needs {module!r}, which is not installed: {install_hint(extra)}")
