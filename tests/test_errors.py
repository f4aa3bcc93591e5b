"""One exception root: every exception class the package defines is an AgentBreakerError (its
standard base kept), so one `except agent_breaker.AgentBreakerError` catches them all; the tree
in agent_breaker/_errors.py names each of them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import agent_breaker
from agent_breaker import AgentBreakerError, _errors

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


@pytest.mark.parametrize("cls", exception_classes(), ids=lambda c: c.__qualname__)
def test_each_is_named_in_the_tree(cls):
    assert cls is AgentBreakerError or cls.__qualname__ in (_errors.__doc__ or "")


def test_the_standard_bases_are_kept():
    from agent_breaker import ConfigError, InvalidEventError, StorageError

    assert issubclass(ConfigError, ValueError) and issubclass(InvalidEventError, ValueError)
    assert issubclass(StorageError, RuntimeError)
