"""One exception root: every exception class the package defines is an AgentBreakerError (its
standard base kept), so one `except agent_breaker.AgentBreakerError` catches them all; the tree
on docs/architecture.md names each of them, under its own bases."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import agent_breaker
from agent_breaker import AgentBreakerError

#: control flow inside one function, never raised out of the package: not an error of ours
INTERNAL = {"agent_breaker.escalations.sqlite._DiskFull"}
#: modules that import an optional dependency
OPTIONAL = {"nemoguardrails", "redis", "pika", "litellm", "langgraph", "langchain_core", "agents", "opentelemetry"}


def exception_classes() -> list[type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(agent_breaker.__path__, "agent_breaker."):
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:
            if (exc.name or "").split(".")[0] in OPTIONAL:
                continue
            raise
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__.startswith("agent_breaker"):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [cls for name, cls in sorted(found.items()) if name not in INTERNAL]


def test_every_exception_of_the_package_is_an_agent_breaker_error():
    classes = exception_classes()
    assert len(classes) >= 20
    outside = [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, AgentBreakerError)]
    assert outside == []


def documented_tree() -> dict[str, str]:
    """name -> the name of the class it hangs under, read from the tree drawn on the page."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    tree = page.split("## Errors", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in tree.strip().splitlines()[1:]:
        match = re.match(r"^([│ ]*)[├└]── (.*)$", line)
        if match is None:  # a description running on to the next line
            continue
        depth = len(match.group(1)) // 4
        del stack[depth:]
        names = re.findall(r"(?:^|, )([A-Z]\w+)", match.group(2).split(":")[0])
        for name in names:
            parents[name] = stack[-1][1] if stack else "AgentBreakerError"
        stack.append((depth, names[-1]))
    return parents


@pytest.mark.parametrize("cls", exception_classes(), ids=lambda c: c.__qualname__)
def test_each_is_in_the_tree_under_its_base(cls):
    if cls is AgentBreakerError:
        return
    tree = documented_tree()
    assert cls.__qualname__ in tree
    parent = next(b for b in cls.__mro__[1:] if b.__name__ == tree[cls.__qualname__])
    assert issubclass(parent, AgentBreakerError)


def test_the_standard_bases_are_kept():
    from agent_breaker import ConfigError, InvalidEventError, StorageError

    assert issubclass(ConfigError, ValueError) and issubclass(InvalidEventError, ValueError)
    assert issubclass(StorageError, RuntimeError)
