"""Reference pages generated from the code, so the docs cannot drift from it: every config key
with its type, default and description (the pydantic fields), and the event protocol (its
table). The docs site's build hook writes them (`docs/_hooks.py`); `python -m
agent_breaker._reference config|protocol` prints one."""

from __future__ import annotations

import json
import sys
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .config import AgentBreakerConfig
from .protocol import COMMON_FIELDS, KINDS


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (tuple, list):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_name(args[1])}" if len(args) == 2 else "map"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type):
        return "section" if issubclass(annotation, BaseModel) else annotation.__name__
    return str(annotation).replace("typing.", "")


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, tuple | frozenset | set):
        value = list(value)
    text = json.dumps(value, default=str)
    return f"`{text}`" if len(text) <= 60 else f"`{text[:57]}...`"


def _sections(model: type[BaseModel], prefix: str) -> list[tuple[str, type[BaseModel]]]:
    """(key path, model) of `model` and of every section under it, in declaration order."""
    out = [(prefix, model)]
    for name, field in model.model_fields.items():
        for candidate in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                path = f"{prefix}.{name}" if prefix else name
                if typing.get_origin(field.annotation) is dict:
                    path += ".<name>"
                out += _sections(candidate, path)
    return out


def _section_doc(annotation: Any) -> str:
    """A section's own description: its model's docstring (a key without one of its own)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return (candidate.__doc__ or "").strip()
    return ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def config_reference() -> str:
    """Every key of the `agent_breaker` block: type, default and what it does."""
    lines = [
        "# Config keys",
        "",
        "Generated from the config model (`agent_breaker.config`). Every key below sits in the",
        "`agent_breaker` block (a YAML file of its own, or a NeMo `config.yml`'s",
        "`custom_data: agent_breaker:`); unknown keys are errors. See [Configuration](../configuration.md)",
        "for how the block is loaded and overridden.",
    ]
    seen: set[type[BaseModel]] = set()
    for path, model in _sections(AgentBreakerConfig, ""):
        if model in seen and path:
            lines += ["", f"## `{path}`", "", f"The same keys as `{model.__name__}` above."]
            continue
        seen.add(model)
        doc = _cell((model.__doc__ or "").strip())
        lines += ["", f"## `{path}`" if path else "## Top level", ""]
        if doc:
            lines += [doc, ""]
        lines += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        for name, field in model.model_fields.items():
            what = field.description or _section_doc(field.annotation)
            lines.append(f"| `{name}` | {_cell(_type_name(field.annotation))} | {_default(field)} | {_cell(what)} |")
    return "\n".join(lines) + "\n"


def protocol_reference() -> str:
    """The event protocol: each kind's Colang event, trace-format type, fields and verdict."""
    lines = [
        "# Event protocol",
        "",
        "Generated from the protocol table (`agent_breaker.protocol`). Each kind of agent event has a",
        "Colang event the flows match, a trace-format `type` (what `replay` reads and",
        "`POST /v1/agent-breaker/events` takes), the engine method that decides it, the action the",
        "flows call and the verdict event they send back.",
        "",
        "Every event may carry: "
        + ", ".join(f"`{c}`" for c in COMMON_FIELDS)
        + " (`session_id` or `conversation` names the session).",
        "",
        "| kind | Colang event | engine method | action | verdict event | `nemoguardrails chat` verb |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for k in KINDS:
        lines.append(f"| `{k.name}` | `{k.colang}` | `{k.handler}` | `{k.action}` | `{k.verdict}` | `{k.chat_verb}` |")
    for k in KINDS:
        own = {c: t for c, t in k.fields.items() if c not in COMMON_FIELDS}
        lines += ["", f"## `{k.name}`: `{k.colang}`", "", "| Colang field | trace field | required |", "| --- | --- | --- |"]
        for colang, trace in own.items():
            lines.append(f"| `{colang}` | `{trace}` | {'yes' if colang in k.required else ''} |")
        lines += ["", f"Verdict `{k.verdict}`: " + ", ".join(f"`{f}`" for f in k.verdict_fields) + "."]
    return "\n".join(lines) + "\n"


def http_reference() -> str:
    """The routes `agent-breaker serve` answers."""
    from .server._paths import routes

    lines = [
        "# HTTP API",
        "",
        "Generated from the server's route table (`agent_breaker.server._paths.routes`, which a test",
        "holds to the routes of a built app). Every route needs `Authorization: Bearer <token>`",
        "(see [Security](../security.md)); `/metrics` an all-tenant token or the metrics token, the",
        'admin routes the admin token. Errors are JSON: `{"error": {"message": ..., "type": ..., "code": ...}}`.',
        "The guides say what each body holds:",
        "[NeMo](../nemo.md), [Operating](../operating.md), [Coding agents](../coding-agents.md).",
        "",
        "| method | path | what it does |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {method} | `{path}` | {_cell(what)} |" for method, path, what in routes()]
    return "\n".join(lines) + "\n"


PAGES = {"config": config_reference, "protocol": protocol_reference, "http": http_reference}

if __name__ == "__main__":
    sys.stdout.write(PAGES[sys.argv[1]]())
