"""A Claude Code call's token usage, read from the session's transcript: counted once per model
message, on its first call; nothing read from what is not a regular file; and a token budget
through the hook command that holds with it."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent_breaker._transcripts import TAIL_BYTES, claude_code_usage
from agent_breaker.hooks import BLOCK_EXIT, CLAUDE_CODE
from tests.test_hooks import common

USAGE = {"input_tokens": 4, "cache_creation_input_tokens": 12_274, "cache_read_input_tokens": 11_698, "output_tokens": 136}


def assistant(message_id: str, blocks: list[dict[str, Any]], usage: dict[str, int], model: str = "claude-sonnet-4") -> dict:
    """One streamed line of a Claude Code transcript: a content block of a model message."""
    return {
        "type": "assistant",
        "sessionId": "s",
        "uuid": f"u-{message_id}-{len(blocks)}",
        "message": {"id": message_id, "role": "assistant", "model": model, "content": blocks, "usage": usage},
    }


def tool_use(call_id: str, command: str = "ls") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}


def tool_result(call_id: str) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}]},
    }


def write(path: Path, lines: list[Any], tail: str = "") -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + tail)
    return str(path)


def test_a_messages_usage_counts_once_on_its_first_call(tmp_path):
    path = write(
        tmp_path / "t.jsonl",
        [
            {"type": "user", "message": {"role": "user", "content": "fix the build"}},
            assistant("msg_1", [{"type": "text", "text": "Two checks."}], {**USAGE, "output_tokens": 2}),
            assistant("msg_1", [tool_use("toolu_a")], {**USAGE, "output_tokens": 90}),
            assistant("msg_1", [tool_use("toolu_b")], USAGE),
            tool_result("toolu_a"),
            tool_result("toolu_b"),
            assistant("msg_2", [tool_use("toolu_c")], {"input_tokens": 10, "output_tokens": 5}),
        ],
        tail='{"type": "assistant", "message": {"id": "msg_3", "content": [{"type": "tool_use", "id": "toolu_d"',  # half written
    )
    assert claude_code_usage(path, "toolu_a") == {"input_tokens": 23_976, "output_tokens": 136, "model": "claude-sonnet-4"}
    assert claude_code_usage(path, "toolu_b") is None  # the same message: counted on toolu_a
    assert claude_code_usage(path, "toolu_c") == {"input_tokens": 10, "output_tokens": 5, "model": "claude-sonnet-4"}
    for unknown in ("toolu_d", "toolu_zz", ""):
        assert claude_code_usage(path, unknown) is None


def test_only_the_transcripts_end_is_read(tmp_path):
    filler = [{"type": "user", "message": {"role": "user", "content": "x" * 1000}}] * (TAIL_BYTES // 1000 + 10)
    path = write(tmp_path / "t.jsonl", [assistant("msg_old", [tool_use("toolu_old")], USAGE), *filler])
    assert claude_code_usage(path, "toolu_old") is None


@pytest.mark.parametrize("kind", ["fifo", "folder", "missing"])
def test_nothing_is_read_from_what_is_not_a_regular_file(tmp_path, kind):
    path = tmp_path / "t.jsonl"
    if kind == "fifo":
        os.mkfifo(path)  # a read would wait for a writer forever
    elif kind == "folder":
        path.mkdir()
    assert claude_code_usage(str(path), "toolu_a") is None


def test_a_token_budget_through_the_hook_command_holds_with_the_transcripts_usage(tmp_path):
    from agent_breaker.hooks.command import run

    config = tmp_path / "config.yml"
    config.write_text(
        "custom_data:\n  agent_breaker:\n    mode: enforce\n    budget: {max_tokens: 100000, max_cost_usd: null}\n"
        "    modes: {step_limit: 'off', token_velocity: 'off'}\n"
    )
    transcript, lines = tmp_path / "t.jsonl", []
    state = f"sqlite:///{tmp_path}/h.db"
    codes = []
    # 24k tokens a call: after the 4th, one more step (the governor projects it) is over 100k
    for n in range(6):
        lines.append(assistant(f"msg_{n}", [tool_use(f"toolu_{n}", f"cat part{n}")], USAGE))
        write(transcript, lines)
        pre = {
            **common(CLAUDE_CODE, "s-budget", "PreToolUse"),
            "transcript_path": str(transcript),
            "tool_name": "Bash",
            "tool_input": {"command": f"cat part{n}"},
            "tool_use_id": f"toolu_{n}",
        }
        out, err = io.StringIO(), io.StringIO()
        raw = io.BytesIO(json.dumps(pre).encode())
        codes.append(
            run(CLAUDE_CODE, raw, out, err, config=str(config), state=state, server=None, fail_closed=True, daemon=False)
        )
        if codes[-1] == BLOCK_EXIT:
            assert "token_budget" in err.getvalue(), err.getvalue()
            break
    assert codes == [0, 0, 0, BLOCK_EXIT]


# ----------------------------------------------------------------------------- whose turn it is
# Lines shaped as Codex 0.171 and Gemini CLI 0.61 wrote them in a recorded headless run, at the
# moment each hook ran.

SESSION = "01a241da-a7c6-7892-bd25-9eebe631e6c7"
TURN = "01a241da-a7e4-7e02-9e1a-1edaffa69645"


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def codex_rollout(*after_start: dict[str, Any], turn: str = TURN) -> list[dict[str, Any]]:
    return [
        {"type": "session_meta", "payload": {"id": SESSION}},
        {"type": "event_msg", "payload": {"type": "task_started", "turn_id": turn}},
        {"type": "response_item", "payload": {"type": "message", "role": "developer", "content": []}},
        {"type": "turn_context", "payload": {"turn_id": turn}},
        *after_start,
    ]


CALL = {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "call_id": "call_0000"}}
PROMPT_ITEM = {"type": "response_item", "payload": {"type": "message", "role": "user", "content": []}}


def test_a_codex_prompt_is_the_users_when_its_turn_has_just_begun(tmp_path):
    from agent_breaker._transcripts import codex_users_turn

    path = tmp_path / f"rollout-2026-12-04T16-19-38-{SESSION}.jsonl"
    assert codex_users_turn(_write_lines(path, codex_rollout()), SESSION, TURN)
    # the agent's shell, inside a call of the turn: the model has answered in it
    assert not codex_users_turn(_write_lines(path, codex_rollout(PROMPT_ITEM, CALL)), SESSION, TURN)
    # a turn that is not the last begun, a turn of no id, another session's rollout
    assert not codex_users_turn(_write_lines(path, codex_rollout(turn="older")), SESSION, TURN)
    assert not codex_users_turn(_write_lines(path, codex_rollout()), SESSION, None)
    other = tmp_path / "rollout-2026-12-04T16-19-38-another.jsonl"
    assert not codex_users_turn(_write_lines(other, codex_rollout()), SESSION, TURN)


def gemini_record(*messages: dict[str, Any], session: str = SESSION) -> list[dict[str, Any]]:
    head = {"sessionId": session, "projectHash": "4ad2", "startTime": "2026-12-04T16:19:51.961Z", "kind": "main"}
    context = {"id": "c", "type": "user", "content": [{"text": "<session_context>..."}]}
    return [head, {"$set": {"messages": []}}, context, *messages]


def test_a_gemini_prompt_is_the_users_when_the_model_has_finished(tmp_path):
    from agent_breaker._transcripts import gemini_users_turn

    path = tmp_path / "session-2026-12-04T16-19-d761e596.jsonl"
    done = {"id": "g2", "type": "gemini", "content": "I am done."}
    working = {"id": "g1", "type": "gemini", "content": ""}  # being written: no words yet
    called = {"id": "g1", "type": "gemini", "content": "", "toolCalls": [{"id": "run_shell_command_1", "status": "success"}]}
    answered = {"id": "u1", "type": "user", "content": [{"functionResponse": {"id": "run_shell_command_1"}}]}
    assert gemini_users_turn(_write_lines(path, gemini_record()), SESSION)  # the session's first prompt
    assert gemini_users_turn(_write_lines(path, gemini_record(called, answered, done)), SESSION)
    for busy in ([working], [called], [called, answered], [called, answered, working]):
        assert not gemini_users_turn(_write_lines(path, gemini_record(*busy)), SESSION), busy
    assert not gemini_users_turn(_write_lines(path, gemini_record(done, session="another")), SESSION)


def test_a_gemini_record_longer_than_the_tail_is_still_read_as_the_sessions(tmp_path):
    """The record names its session on its first line only: a session past TAIL_BYTES keeps it."""
    from agent_breaker._transcripts import gemini_users_turn

    path = tmp_path / "session-2026-12-04T16-19-d761e596.jsonl"
    long = {"id": "u0", "type": "user", "content": [{"functionResponse": {"id": "r", "response": "y" * TAIL_BYTES}}]}
    done = {"id": "g2", "type": "gemini", "content": "I am done."}
    assert gemini_users_turn(_write_lines(path, gemini_record(long, done)), SESSION)
    assert not gemini_users_turn(_write_lines(path, gemini_record(long, done, session="another")), SESSION)
