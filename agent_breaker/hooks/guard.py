"""The guard a hook call is decided by: the engine on the coding config and a SQLite store, as
one hook process (`command`) or the per-user daemon (`daemon`) holds it. Imported only where a
call is decided in this process: a hook answered by the daemon loads no engine."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from .._work import sent_back
from ..events import is_id
from ..protocol import TOOL_CALL_EVENT, TOOL_RESULT_EVENT
from . import CLAUDE_CODE, CODEX, USER_EVENT, GuardFailure, Hook, HookAnswer, answer, refused, users_turn
from .witness import UNREAD, Record, Unread, Witness


def incidents_path(state_file: Path) -> Path:
    """Where the hooks' incidents go unless the config names a file: beside their state
    (`hooks.db` -> `hooks.incidents.jsonl`), for `agent-breaker report`."""
    return state_file.with_name(state_file.stem + ".incidents.jsonl")


class HookGuard:
    """The engine on the coding config and the SQLite store, as one hook process or the daemon
    (`daemon`) holds it."""

    def __init__(self, config_path: str | None, state: str, *, witness: bool = False) -> None:
        # imported here: a hook that asks nothing, or that the daemon answers, costs no engine
        from .. import heuristics as H
        from ..config import load_config
        from ..configs import ROOT
        from ..engine import Engine
        from ..receipts import ReceiptKeys
        from ..store.sqlite import SQLiteStore

        config = load_config(config_path or ROOT / "coding_agent" / "config.yml")
        self._store = SQLiteStore(state, ttl_s=config.sessions.ttl_s)
        try:
            # one key for every hook process: each decides on the hashes the others stored
            secret = config.fingerprint_secret or self._store.secret("fingerprint")
            update: dict[str, object] = {"fingerprint_secret": secret}
            if config.incidents.file is None:  # what was warned and blocked, beside the state
                update["incidents"] = config.incidents.model_copy(update={"file": str(incidents_path(self._store.path))})
            config = config.model_copy(update=update)
            self._engine = Engine(
                config, store=self._store, listeners=[], escalations=False, receipt_keys=ReceiptKeys.ephemeral()
            )
            # what a long-lived guard (the daemon) saw of each session, which a state file put back
            # cannot undo; a guard that decides one call has nothing to remember
            self._witness = Witness(config.sessions.ttl_s, time.monotonic) if witness else None
            # a transcript is read only where tokens count
            self._counts_tokens = any(config.mode_of(h) != "off" for h in (H.TOKEN_BUDGET, H.TOOL_TOKEN_BUDGET, H.TOKEN_VELOCITY))
        except BaseException:
            self._store.close()
            raise

    def decide(self, hook: Hook) -> HookAnswer:
        """The answer to a hook that asks for a decision, decided as the hook endpoint decides
        it (the dispatch's verdict event: an event the engine cannot read is refused). A state
        the guard cannot write raises GuardFailure (the fail policy answers), unless the session
        is known to be halted: its calls stay refused."""
        from .. import heuristics as H
        from .._transcripts import claude_code_usage
        from ..dispatch import verdict_event

        assert hook.event is not None
        event, session = hook.event, hook.event["session_id"]
        call = event["type"] == TOOL_CALL_EVENT
        if event["type"] == USER_EVENT:
            if sent_back(event.get("text") or ""):
                return HookAnswer()  # a refused stop's reason, which Gemini CLI sends as a prompt: not the user's
            in_flight = self._engine.in_flight(session)
            if not users_turn(hook, in_flight, recorded_users_turn):
                return HookAnswer()
        elif call and self._witness is not None and (tampered := self._witness.refusal(session, self._record)) is not None:
            return refused(tampered)
        elif event["type"] == TOOL_RESULT_EVENT and self._witness is not None and is_id(session) and is_id(event.get("call_id")):
            # ids the engine would take only: the agent writes them, and the witness keeps them
            self._witness.answered(session, event["call_id"])
        if self._counts_tokens and hook.transcript and hook.agent == CLAUDE_CODE and event.get("call_id"):
            event = {**event, **(claude_code_usage(hook.transcript, event["call_id"]) or {})}
        try:
            verdict = verdict_event(self._engine, event)
        except Exception:
            # a guard that crashes answers by the fail policy, but not for a session known to be halted
            halted = self._still_halted(session, call, "The guard failed to decide this call")
            if halted is None:
                raise
            return halted
        if verdict.get("heuristic") == H.STORAGE_UNAVAILABLE:
            halted = self._still_halted(session, call, "The guard's state cannot be written now")
            if halted is None:
                raise GuardFailure(str(verdict.get("reason")))
            return halted
        if self._witness is not None:
            self._witness.saw(session, self._record(session), users_turn=event["type"] == USER_EVENT)
        return answer(hook, verdict)

    def _still_halted(self, session: str, call: bool, why: str) -> HookAnswer | None:
        """A call's refusal when the guard could not decide it but knows its session is halted
        (from its witness, or the state as it reads, though not writes); None otherwise."""
        if not call:
            return None
        halt = None if self._witness is None else self._witness.halt(session)
        if halt is None and isinstance(stored := self._record(session), tuple):
            halt = stored[1]
        return None if halt is None else refused(f"agent-breaker ({halt[0]}): {halt[1]} {why}; the session stays halted.")

    def _record(self, session: str) -> Record | Unread:
        from ..events import InvalidEventError
        from ..store import StorageError

        try:
            return self._engine.record_of(session)
        except (StorageError, InvalidEventError):  # the decision says why
            return UNREAD

    def close(self) -> None:
        self._store.close()


def recorded_users_turn(hook: Hook, in_flight: Mapping[str, str]) -> bool:
    """Whether the agent's own record of the session (`hook.transcript`) shows it waiting for
    its user (`_transcripts`), with no call in flight at the guard; Claude Code's transcript
    tells a call in flight that has answered from one that has not."""
    from .._transcripts import claude_code_users_turn, codex_users_turn, gemini_users_turn

    assert hook.event is not None and hook.transcript is not None
    session = hook.event["session_id"]
    if hook.agent == CLAUDE_CODE:
        return claude_code_users_turn(hook.transcript, session, in_flight)
    if in_flight:
        return False
    if hook.agent == CODEX:
        return codex_users_turn(hook.transcript, session, hook.turn)
    return gemini_users_turn(hook.transcript, session)
