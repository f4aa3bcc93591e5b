"""The guard engine: a thin front (`Engine`) over pure deciders, one per event.

Rooms: `_facts` reads an event into hashes and numbers; `_decide` holds the deciders, functions
of the session's state and what was read; `_escalation` hands sessions to a human; `_fallback`
routes a call whose tool is down; `_views` keeps what the engine remembers of tools across
sessions; `_instrument` counts, times, traces and reports; `_front` is the `Engine` that runs
a decision through them and the store.
"""

from ._decide import UNNAMED_CALL
from ._front import Engine, breaker_key_parts, fingerprinter_for, preflight
from ._instrument import Listener, incident_log, log_incident

__all__ = [
    "UNNAMED_CALL",
    "Engine",
    "Listener",
    "breaker_key_parts",
    "fingerprinter_for",
    "incident_log",
    "log_incident",
    "preflight",
]
