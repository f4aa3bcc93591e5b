"""Schema checks of tool arguments and results (`tools.<name>.args_schema | args_model`,
`result_schema | result_model`).

A check answers None, or one problem the agent can act on: the field (as the schema or the
model names it) and what is wrong with it. It never quotes the value, nor a key the schema does
not declare: what the agent sent is payload, and problems reach verdicts, logs and incidents.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._errors import AgentBreakerError

Check = Callable[[Any], "str | None"]

#: how many of a schema's own values (an enum's) a problem may list
MAX_LISTED = 8


class SchemaError(AgentBreakerError, ValueError):
    """A schema or model in the config that cannot check anything."""


def json_schema_check(schema: dict[str, Any]) -> Check:
    """A check against a JSON Schema (its `$schema` draft, else 2020-12); the schema itself is
    checked here, so a broken one fails at config load, not at the first call."""
    import jsonschema
    from jsonschema.exceptions import SchemaError as BadSchema
    from jsonschema.exceptions import best_match

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except BadSchema as exc:
        raise SchemaError(f"not a valid JSON Schema: {exc.message[:200]}") from None
    validator = cls(schema)

    def check(value: Any) -> str | None:
        error = best_match(validator.iter_errors(value))
        return None if error is None else _json_problem(error)

    return check


def _json_problem(error: Any) -> str:
    where = _declared_path(error.absolute_schema_path)
    what = _JSON_RULES.get(error.validator, lambda v: f"breaks the schema's {error.validator!r} rule")(error.validator_value)
    if error.validator == "required":
        # the missing name is the one of the schema's required names the value lacks
        missing = [name for name in error.validator_value if isinstance(error.instance, dict) and name not in error.instance]
        what = f"needs {_names(missing)}"
    return f"{where}: {what}" if where else what


def _declared_path(schema_path: Iterable[Any]) -> str:
    """The field a schema path leads to, named by the schema's own `properties` keys (an item
    of an array as `[]`): what the agent sent never names it."""
    parts: list[str] = []
    before = None
    for part in schema_path:
        if before == "properties" and isinstance(part, str):
            parts.append(part)
        elif part in ("items", "prefixItems"):
            parts.append("[]")
        before = part
    return "field " + ".".join(parts).replace(".[]", "[]") if parts else ""


def _names(names: Iterable[Any]) -> str:
    listed = [repr(str(n))[:66] for n in list(names)[:MAX_LISTED]]
    return ", ".join(listed) or "a field"


_JSON_RULES: dict[str, Callable[[Any], str]] = {
    "type": lambda v: f"must be of type {v if isinstance(v, str) else ' or '.join(map(str, v))}",
    "enum": lambda v: f"must be one of {_names(v)}",
    "const": lambda v: "must be the schema's constant value",
    "minimum": lambda v: f"must be at least {v}",
    "maximum": lambda v: f"must be at most {v}",
    "exclusiveMinimum": lambda v: f"must be more than {v}",
    "exclusiveMaximum": lambda v: f"must be less than {v}",
    "multipleOf": lambda v: f"must be a multiple of {v}",
    "minLength": lambda v: f"must be at least {v} characters long",
    "maxLength": lambda v: f"must be at most {v} characters long",
    "pattern": lambda v: "does not match the required pattern",
    "format": lambda v: f"must be a valid {v}",
    "minItems": lambda v: f"must have at least {v} items",
    "maxItems": lambda v: f"must have at most {v} items",
    "uniqueItems": lambda v: "must not repeat items",
    "additionalProperties": lambda v: "holds a field the schema does not allow",
    "unevaluatedProperties": lambda v: "holds a field the schema does not allow",
    "minProperties": lambda v: f"must have at least {v} fields",
    "maxProperties": lambda v: f"must have at most {v} fields",
    "oneOf": lambda v: "must match exactly one of the schema's alternatives",
    "anyOf": lambda v: "must match one of the schema's alternatives",
    "not": lambda v: "matches a shape the schema forbids",
}


def model_check(dotted: str) -> Check:
    """A check against a pydantic model named `package.module:Model` (or `package.module.Model`)."""
    from pydantic import BaseModel, ValidationError

    module_name, sep, attr = dotted.partition(":")
    if not sep:
        module_name, _, attr = dotted.rpartition(".")
    try:
        model = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SchemaError(f"cannot import the model {dotted!r}: {exc}") from None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise SchemaError(f"{dotted!r} is not a pydantic model")

    declared = _declared_names(model.model_json_schema())

    def check(value: Any) -> str | None:
        try:
            model.model_validate(value)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            return _model_problem(errors[0], declared)
        except Exception:  # a validator of the model's own that raised something else
            return "breaks one of the model's own rules"
        return None

    return check


def _declared_names(schema: Any) -> frozenset[str]:
    """Every property name a model's JSON schema declares, at any depth ($defs included)."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                names.update(k for k in props if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


#: pydantic error types whose message describes the rule from the model alone (never the input)
_SAFE_MESSAGES = frozenset(
    {
        "missing",
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "multiple_of",
        "too_short",
        "too_long",
        "string_too_short",
        "string_too_long",
        "string_pattern_mismatch",
        "literal_error",
        "enum",
    }
)


def _model_problem(error: Mapping[str, Any], declared: frozenset[str]) -> str:
    kind = str(error["type"])
    loc = error["loc"][:-1] if kind == "extra_forbidden" else error["loc"]
    # a field is named only as the model declares it: a key the agent made up is not repeated
    parts = ["[]" if isinstance(p, int) else p if p in declared else "{}" for p in loc]
    where = ".".join(parts).replace(".[]", "[]")
    if kind == "extra_forbidden":
        what = "holds a field the model does not allow"
    elif kind in _SAFE_MESSAGES or kind.endswith(("_type", "_parsing")):
        what = str(error["msg"])[:200]
    else:
        what = f"breaks the model's {kind!r} rule"
    return f"field {where}: {what}" if where else what


def compile_check(schema: dict[str, Any] | None, model: str | None) -> Check | None:
    """The check a tool's config asks for, if any (a schema and a model both: both must pass).
    Compiled once per distinct schema and model, however many configs and overrides name it."""
    return _compiled(None if schema is None else json.dumps(schema, sort_keys=True), model)


@functools.lru_cache(maxsize=1024)
def _compiled(schema_json: str | None, model: str | None) -> Check | None:
    checks: list[Check] = []
    if schema_json is not None:
        checks.append(json_schema_check(json.loads(schema_json)))
    if model:
        checks.append(model_check(model))
    if len(checks) < 2:
        return checks[0] if checks else None
    first, second = checks

    def both(value: Any) -> str | None:
        return first(value) or second(value)

    return both
