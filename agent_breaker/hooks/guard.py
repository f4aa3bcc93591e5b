"""The guard a hook call is decided by: the engine on the coding config and a SQLite store, as
one hook process (`command`) or the per-user daemon (`daemon`) holds it. Imported only where a
call is decided in this process: a hook answered by the daemon loads no engine."""

from __future__ import annotations

from pathlib import Path

from . import CLAUDE_CODE, USER_EVENT, Hook, HookAnswer, answer, users_turn


def incidents_path(state_file: Path) -> Path:
    """Where the hooks' incidents go unless the config names a file: beside their state
    (`hooks.db` -> `hooks.incidents.jsonl`), for `agent-breaker report`."""
    return state_file.with_name(state_file.stem + ".incidents.jsonl")


class HookGuard:
    """The engine on the coding config and the SQLite store, as one hook process or the daemon
    (`daemon`) holds it."""

    def __init__(self, config_path: str | None, state: str) -> None:
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
            # a transcript is read only where tokens count
            self._counts_tokens = any(config.mode_of(h) != "off" for h in (H.TOKEN_BUDGET, H.TOOL_TOKEN_BUDGET, H.TOKEN_VELOCITY))
        except BaseException:
            self._store.close()
            raise

    def decide(self, hook: Hook) -> HookAnswer:
        """The answer to a hook that asks for a decision, decided as the hook endpoint decides
        it (the dispatch's verdict event: an event the engine cannot read is refused)."""
        from .._transcripts import claude_code_usage, claude_code_users_turn
        from ..dispatch import verdict_event

        assert hook.event is not None
        event = hook.event
        if event["type"] == USER_EVENT:
            in_flight = self._engine.awaiting_results(event["session_id"])
            if not users_turn(hook, in_flight, claude_code_users_turn):
                return HookAnswer()
        if self._counts_tokens and hook.transcript and hook.agent == CLAUDE_CODE and event.get("call_id"):
            event = {**event, **(claude_code_usage(hook.transcript, event["call_id"]) or {})}
        return answer(hook, verdict_event(self._engine, event))

    def close(self) -> None:
        self._store.close()
