"""`agent-breaker report`: what the guards did, or would have done, and what to set before enforcing.

The input is a trace (shared/spec/traces.md), replayed in observe mode through `replay.Replayer`,
or the incident JSON lines the engine's listeners write. Every figure comes from the input:
trips, the spend after each session's first session-ending trip, the counters the trips
carried, and, given the sessions known to be legitimate, the limits that would have let them
all through. `format_text` and `format_html` only lay the report out.

One room per job, each importing only the rooms before it:

- `_read`: the input, checked line by line, into `Observed`; the legit sessions (`read_legit`)
- `_model`: the figures (`build`), and the `RULES` that map counters to settings
- `_text`: the tables, laid out for the terminal (`format_text`)
- `_html`: the same tables and the plots, one self-contained page (`format_html`)
"""

from __future__ import annotations

from ._html import format_html
from ._model import RULES, Rule, build, percentile
from ._read import ReportError, observe, read_legit
from ._text import format_text

__all__ = ["RULES", "ReportError", "Rule", "build", "format_html", "format_text", "observe", "percentile", "read_legit"]
