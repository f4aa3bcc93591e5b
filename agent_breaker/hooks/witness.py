"""The hook daemon's own memory of each session it decided: how many steps the state held after
its last decision there, and the session's halt.

The state file belongs to the user, so to the agent, whose shell runs as the user: deleting a
session's rows, or putting back an older copy of the file, would erase a halt or the streak of a
loop about to be cut. The daemon outlives the hook processes and holds this record in its own
memory: a session whose stored steps went back is noticed, and its calls are refused until a
turn of its user (as a loop's halt is lifted). So is a session where one call's result came twice:
the agent's shell can run the hook with a made-up result (a success, to pass its loop off as
progress) while the call runs, and the agent's own result follows; no agent sends two. When the
state cannot be written, the halt it remembers keeps the session's calls refused whatever the
fail policy. Pure: the clock is given.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from ..heuristics import CORRUPT_STATE

#: a session's halt, as the engine keeps it: (heuristic, reason)
Halt = tuple[str, str]
#: what the store holds of a session: (steps taken, halt), or None for nothing
Record = tuple[int, Halt | None] | None


class Unread:
    """The store could not be read: nothing is known, nothing is changed."""


UNREAD = Unread()
#: the calls answered whose ids are kept, for every session (the newest)
MAX_ANSWERED = 65_536


class Witness:
    """Per session (its id): the steps the store held and its halt, for `ttl_s` after the last
    decision there (as long as the store keeps an idle session), at most `capacity` sessions."""

    def __init__(self, ttl_s: float, clock: Callable[[], float], capacity: int = 10_000) -> None:
        self._ttl_s, self._clock, self._capacity = ttl_s, clock, capacity
        self._seen: OrderedDict[str, tuple[int, Halt | None, float]] = OrderedDict()
        # the calls whose result came, per session (the agents that send call ids)
        self._answered: OrderedDict[tuple[str, str], None] = OrderedDict()
        # why a session's calls are refused until its user speaks: a result that came twice
        self._forged: dict[str, str] = {}

    def _entry(self, session: str) -> tuple[int, Halt | None, float] | None:
        entry = self._seen.get(session)
        if entry is not None and self._clock() - entry[2] > self._ttl_s:
            del self._seen[session]
            return None
        return entry

    def saw(self, session: str, record: Record | Unread, *, users_turn: bool = False) -> None:
        """After a decision: what the store holds of `session` now. A record that went back is
        kept as it was (it stays noticed) until a turn of the session's user."""
        if isinstance(record, Unread):
            return
        entry = self._entry(session)
        if users_turn:
            self._forged.pop(session, None)
        if record is None:
            if users_turn:
                self._seen.pop(session, None)
            return
        if entry is not None and record[0] < entry[0] and not users_turn:
            return
        self._seen[session] = (record[0], record[1], self._clock())
        self._seen.move_to_end(session)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    def halt(self, session: str) -> Halt | None:
        entry = self._entry(session)
        return None if entry is None else entry[1]

    def answered(self, session: str, call_id: str) -> None:
        """A result of call `call_id` came: a second one marks the session (`refusal`)."""
        key = (session, call_id)
        if key in self._answered:
            self._forged[session] = (
                f"agent-breaker ({CORRUPT_STATE}): the result of call {call_id} came twice: one was not the agent's "
                "(made up from its shell). Calls are refused until the user answers. Stop and tell the user what happened."
            )
            while len(self._forged) > self._capacity:
                del self._forged[next(iter(self._forged))]
            return
        self._answered[key] = None
        while len(self._answered) > MAX_ANSWERED:
            self._answered.popitem(last=False)

    def refusal(self, session: str, read: Callable[[str], Record | Unread]) -> str | None:
        """Why a call of `session` is refused: a result of it came twice, or the store's record
        of it (`read(session)`, read only when this witness saw the session) went back since;
        None when neither (or nothing is known)."""
        if session in self._forged:
            return self._forged[session]
        entry = self._entry(session)
        if entry is None:
            return None
        record = read(session)
        if isinstance(record, Unread):
            return None
        steps = 0 if record is None else record[0]
        if steps >= entry[0]:
            return None
        return (
            f"agent-breaker ({CORRUPT_STATE}): the guard's record of this session went back (it had taken {entry[0]} steps; "
            f"the state file now holds {steps}): it was deleted or replaced while the session ran. Calls are refused "
            "until the user answers. Stop and tell the user what happened."
        )
