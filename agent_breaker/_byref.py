"""Events the server keeps out of Colang state: the Colang runtime sees an event's ids and a
random reference, and the action reads the payload back from a table that lives for the
request. A routed verdict's mapped arguments go back the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the field by which the server's own events point at their payload: reserved to the server
PAYLOAD_REF = "agent_breaker_ref"
#: payloads by reference, for the request that sent them
PAYLOADS: dict[str, Mapping[str, Any]] = {}
#: a routed verdict's mapped arguments, by the reference of the event it answers
ROUTE_ARGS: dict[str, Any] = {}


def ref_of(event: Any) -> str | None:
    """The reference a Colang event's arguments carry (None: the event came whole)."""
    args = getattr(event, "arguments", event)
    return args.get(PAYLOAD_REF) if isinstance(args, Mapping) else None


def fields_of(event: Any) -> Mapping[str, Any]:
    """A Colang event's arguments (or a plain dict: tests), its payload read back when it came
    by reference. A reference whose request ended is left as it came: `decide` refuses it."""
    args = getattr(event, "arguments", event)
    if not isinstance(args, Mapping):
        return {}
    ref = args.get(PAYLOAD_REF)
    return args if ref is None else PAYLOADS.get(ref, args)
