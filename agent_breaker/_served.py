"""The agent-breaker configs under a root, as NeMo reads them, and why any cannot start: what
`agent-breaker serve` and the shipped root's `init_root` check before anything is served."""

from __future__ import annotations

from pathlib import Path

from .config import AgentBreakerConfig, ConfigError, config_folders, nemo_block
from .engine import preflight

#: what a config folder's `config.py` imports when the folder is agent-breaker's
GLUE_MODULE = "agent_breaker.actions"


def root_problems(root: Path) -> list[str]:
    """Why agent-breaker configs under `root` cannot start (see `read_root`)."""
    return read_root(root)[1]


def read_root(root: Path) -> tuple[dict[str, AgentBreakerConfig], list[str]]:
    """The agent-breaker configs under `root` (a config folder, or a folder of them) as NeMo
    reads them, and why any cannot start: what the environment lacks (a receipt key, a
    fingerprint key) or a value that does not validate, one line per distinct problem, naming
    its configs. Folders whose `config.py` does not import agent-breaker's actions are not ours, and
    folders NeMo cannot read are left to whoever builds them."""
    configs: dict[str, AgentBreakerConfig] = {}
    problems: dict[str, list[str]] = {}  # the message, and the configs it is about
    for name, folder in config_folders(root).items():
        module = folder / "config.py"
        if not module.is_file() or GLUE_MODULE not in module.read_text(errors="replace"):
            continue
        try:
            config = served_config(folder)
        except ConfigError as exc:
            problems.setdefault(str(exc), []).append(name)
            continue
        except Exception:  # NeMo cannot read the folder (a Colang error...): whoever builds it says why
            continue
        try:
            preflight(config)
        except ConfigError as exc:
            problems.setdefault(str(exc), []).append(name)
            continue
        configs[name] = config
    return configs, [f"agent-breaker: config {', '.join(names)}: {message}" for message, names in problems.items()]


def served_config(folder: Path) -> AgentBreakerConfig:
    """A config folder's agent_breaker block as NeMo reads the folder (every YAML file in it,
    merged its way)."""
    from nemoguardrails import RailsConfig

    return nemo_block(RailsConfig.from_path(str(folder)).custom_data, folder)
