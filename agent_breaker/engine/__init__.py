"""The guard engine: a thin front (`Engine`) over pure deciders, one per event.

Rooms: `_facts` reads an event into hashes and numbers; `_reads` gathers what a decision reads
into its decider's input; `_decide` holds the deciders, functions of the session's state and
that input; `_outputs` names the effects a decider asks for, and `_apply` does them;
`_escalation` hands sessions to a human; `_fallback` routes a call whose tool is down; `_views`
keeps what the engine remembers of tools across sessions; `_instrument` counts, times, traces
and reports; `_operator` and `_receipts` are the operator's and the receipts' facades;
`_engine` is the `Engine` that runs a decision through them and the store.
"""

from ._decide import UNNAMED_CALL
from ._engine import Engine, fingerprinter_for, preflight
from ._instrument import Listener, incident_log, log_incident
from ._operator import Operator, breaker_key_parts
from ._receipts import Receipts

__all__ = [
    "UNNAMED_CALL",
    "Engine",
    "Listener",
    "Operator",
    "Receipts",
    "breaker_key_parts",
    "fingerprinter_for",
    "incident_log",
    "log_incident",
    "preflight",
]
