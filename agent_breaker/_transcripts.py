"""What a coding agent's hook input leaves out, read from the agent's own transcript: what its
model spent on a tool call (Claude Code), how a shell command exited (Codex).

Claude Code's hook input carries no token counts, but its `transcript_path` names the session's
JSONL transcript, where each model message is written (one line per content block, each with the
message's usage) before its tool calls run. The usage of the message that made a call is counted
once, on the message's first tool call. Codex and Gemini CLI hooks are not read this way (their
token records are not per call); their sessions count no tokens.

Codex's `PostToolUse` carries a shell command's output and nothing of its exit status. Its
transcript (the session's rollout) records each command as it completes (an `item_completed`
event whose `CommandExecution` item, under the call's id, holds its `exit_code`), before the
hook runs.

Whose turn a prompt is: a prompt hook is the user's only when the agent's own record shows the
session waiting for its user (`claude_code_users_turn`, `codex_users_turn`, `gemini_users_turn`):
the agent's shell can run the hook itself, but only while the model is at work.

Only the `agent-breaker hook` command reads transcripts: it runs as the user, beside the agent. An
HTTP endpoint does not, since a path in a request would let any client make the server read its
files.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator
from typing import Any

#: the transcript's end that is read: the call was just written there
TAIL_BYTES = 4 * 2**20
#: the most of a transcript's first line that is read (Gemini CLI's record names its session there)
HEAD_BYTES = 64 * 2**10


def _tail(path: str) -> bytes | None:
    """The end of a regular file (never a FIFO or a device: a read must not hang the hook)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        os.lseek(fd, max(0, st.st_size - TAIL_BYTES), os.SEEK_SET)
        chunks, left = [], min(st.st_size, TAIL_BYTES)
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _lines_with(data: bytes, needle: bytes) -> list[dict[str, Any]]:
    """The JSON objects of the lines of `data` that hold `needle`, in file order."""
    found, start = [], 0
    while (at := data.find(needle, start)) >= 0:
        begin = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        try:
            line = json.loads(data[begin:end])
        except ValueError:
            line = None  # a line cut by the tail's start, or half written
        if isinstance(line, dict):
            found.append(line)
        start = end + 1
    return found


def _message(line: dict[str, Any]) -> dict[str, Any]:
    message = line.get("message") if line.get("type") == "assistant" else None
    return message if isinstance(message, dict) else {}


def _tool_uses(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [b["id"] for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)]


def _count(usage: dict[str, Any], *keys: str) -> int:
    return sum(v for k in keys if isinstance(v := usage.get(k), int) and not isinstance(v, bool) and v > 0)


def claude_code_usage(path: str, call_id: str) -> dict[str, Any] | None:
    """{"input_tokens", "output_tokens", "model"} of the message that made call `call_id`, if
    this call is its first; None otherwise (another call of the message counts it, or the
    transcript does not tell). Input counts every prompt token the model read, cached or not."""
    data = _tail(path)
    if not data or not call_id:
        return None
    made = [m for line in _lines_with(data, json.dumps(call_id).encode()) if call_id in _tool_uses(m := _message(line))]
    message_id = made[0].get("id") if made else None
    if not isinstance(message_id, str):
        return None
    parts = [m for line in _lines_with(data, json.dumps(message_id).encode()) if (m := _message(line)).get("id") == message_id]
    calls = [c for m in parts for c in _tool_uses(m)]
    if not calls or calls[0] != call_id:
        return None
    usages = [m["usage"] for m in parts if isinstance(m.get("usage"), dict)]
    if not usages:
        return None
    # each streamed line repeats the usage so far: the prompt's is fixed, the output grows
    last = usages[-1]
    usage: dict[str, Any] = {
        "input_tokens": _count(last, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"),
        "output_tokens": max(_count(u, "output_tokens") for u in usages),
    }
    model = made[0].get("model")
    if isinstance(model, str) and model:
        usage["model"] = model
    return usage


def codex_exit_code(path: str, call_id: str) -> int | None:
    """The exit code of Codex's shell call `call_id` as its rollout recorded it (None: not found)."""
    data = _tail(path)
    if data is None:
        return None
    for line in reversed(_lines_with(data, json.dumps(call_id).encode())):
        payload = line.get("payload")
        item = payload.get("item") if isinstance(payload, dict) and payload.get("type") == "item_completed" else None
        if isinstance(item, dict) and item.get("type") == "CommandExecution" and item.get("id") == call_id:
            code = item.get("exit_code")
            return code if isinstance(code, int) and not isinstance(code, bool) else None
    return None


def claude_code_users_turn(path: str, session_id: str, in_flight: Iterable[str]) -> bool:
    """Whether Claude Code's transcript of session `session_id` shows it waiting for its user:
    the agent's last message asked for no tool (its turn ended) or the user stopped it, and each
    call `in_flight` at the guard has its result recorded. A prompt posted from the agent's own
    shell comes while one of its calls runs, or while its model works on a result: neither is
    the user's turn. False when the transcript is not the session's or cannot be read."""
    if os.path.basename(path) != f"{session_id}.jsonl":
        return False
    data = _tail(path)
    if not data:
        return False
    for call_id in in_flight:
        answered = [line for line in _lines_with(data, json.dumps(call_id).encode()) if call_id in _tool_results(line)]
        if not answered:
            return False
    for line in _lines_back(data):
        if line.get("isSidechain") is True or line.get("isMeta") is True:
            continue
        if line.get("type") == "assistant":
            return not _tool_uses(_message(line))
        if line.get("type") == "user":
            # a tool's result: the model is at work on it; else the user's own words (a prompt,
            # or Claude Code's record of their Esc: "[Request interrupted by user]")
            return not _tool_results(line)
    return False


def _tool_results(line: dict[str, Any]) -> list[str]:
    """The call ids of the tool results a user line of Claude Code's transcript carries."""
    message = line.get("message") if line.get("type") == "user" else None
    content = message.get("content") if isinstance(message, dict) else None
    blocks = content if isinstance(content, list) else []
    return [
        b["tool_use_id"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)
    ]


def codex_users_turn(path: str, session_id: str, turn_id: str | None) -> bool:
    """Whether Codex's rollout of session `session_id` shows turn `turn_id` just begun: Codex
    records a turn's start (`task_started`, with its id) before it runs the prompt's hook, and a
    prompt posted from the agent's shell comes while the model is at work in a turn, after its
    calls or its words. False when the rollout is not the session's or cannot be read."""
    if not turn_id or not os.path.basename(path).endswith(f"-{session_id}.jsonl"):
        return False
    data = _tail(path)
    if not data:
        return False
    for line in _lines_back(data):
        payload = line.get("payload")
        if not isinstance(payload, dict):
            continue
        if line.get("type") == "event_msg" and payload.get("type") == "task_started":
            return payload.get("turn_id") == turn_id  # the last turn begun must be this one
        if line.get("type") == "response_item" and not _harness_message(payload):
            return False  # the model has answered in the last turn: it is the agent's
    return False


def _harness_message(payload: dict[str, Any]) -> bool:
    """A rollout item Codex writes itself at a turn's start (its instructions, the context)."""
    return payload.get("type") == "message" and payload.get("role") in ("user", "developer", "system")


def gemini_users_turn(path: str, session_id: str) -> bool:
    """Whether Gemini CLI's chat record of session `session_id` shows it waiting for its user:
    its last message is the model's words with no tool call (the turn ended), or the session's
    opening context. While the model works, its last message is one being written (no words
    yet) or a tool's answer. False when the record is not the session's or cannot be read."""
    head = _head_line(path)
    if not isinstance(head, dict) or head.get("sessionId") != session_id:
        return False  # a record of another session
    data = _tail(path)
    last = next((line for line in _lines_back(data or b"") if line.get("type") in ("user", "gemini")), None)
    if last is None:
        return False
    if last["type"] == "user":
        # the session's opening context alone; a tool's answer is the model's to work on
        return not any(isinstance(p, dict) and "functionResponse" in p for p in _parts(last.get("content")))
    said = any(isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"].strip() for p in _parts(last.get("content")))
    return said and not last.get("toolCalls")


def _lines_back(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of the lines of `data`, last first (a line cut by the tail's start, or
    half written, is skipped)."""
    for raw in reversed(data.split(b"\n")):
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            yield line


def _head_line(path: str) -> Any:
    """The first line of a regular file, as JSON (None if it is not one, or longer than
    HEAD_BYTES): where Gemini CLI names a record's session, however long the record grew."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        first, newline, _ = os.read(fd, HEAD_BYTES).partition(b"\n")
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return json.loads(first) if newline else None
    except ValueError:
        return None


def _parts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"text": content}]
    return content if isinstance(content, list) else []
