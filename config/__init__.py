"""The NeMo Guardrails configs shipped with agent-breaker: the `nemoguardrails server` root.

Each sub-folder is one config (`config.yml`, the flows, and a `config.py` calling
`agent_breaker.actions.init`). `config_path(name)` finds one wherever the package is installed.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def config_path(name: str = "agent_breaker") -> Path:
    path = ROOT / name
    if not (path / "config.yml").is_file():
        known = sorted(p.name for p in ROOT.iterdir() if (p / "config.yml").is_file())
        raise ValueError(f"no agent-breaker config named {name!r}; shipped: {known}")
    return path
