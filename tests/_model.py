"""A scripted model for the real coding agents: the Anthropic Messages API (Claude Code), the
Gemini API (Gemini CLI) and the OpenAI Responses API (Codex), streamed as each agent reads them.

Each request of the agent's main loop (one that offers a shell tool) is answered with the
scenario's next shell command, until the scenario has no more: then a closing text (the
scenario's `closing(k)` the k-th time it ends its turn, when it has one: an end-of-turn hook may
send the agent back to work). Which call comes next is counted from the tool results the request
carries, and which closing from the model's text-only answers it carries, so an agent that
retries a request gets the same answer. Requests of the agent's own side tasks (a title, a routing
choice, a summary: no shell tool offered) get a short text. Every request body is kept, so a
test can read what reached the model after each call (a hook's warning, a denial's reason).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: the shell tools each agent offers, by name
SHELL_TOOLS = ("Bash", "run_shell_command", "exec_command", "shell_command", "shell")
CLOSING = "I am done."


@dataclass
class Scenario:
    """`command(n)`: the n-th shell command the model asks for (from 0), or another tool's call,
    {"tool": name, "input": {...}} (Claude Code adds a description to its input unless it has
    "verbatim": True; Codex: its shell's call with arguments of the test's own too); `turns` of
    them."""

    command: Callable[[int], Any]
    turns: int
    #: the text the model ends its turn with, given how many times it did already in this
    #: conversation (its text-only answers the request carries); None: CLOSING every time
    closing: Callable[[int], str] | None = None


@dataclass
class Seen:
    """One request of the agent's main loop: how many tool results it carried, and its
    conversation (messages, contents or input items, as the API names them); `closings`: how
    many text-only answers of the model (turns it ended) it carried."""

    results: int
    conversation: list[Any]
    closings: int = 0


@dataclass
class ScriptedModel:
    scenario: Scenario
    seen: list[Seen] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # paths of requests that were no main-loop request
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, results: int) -> str | None:
        """The command to ask for after `results` tool results, or None: say the closing text."""
        return self.scenario.command(results) if results < self.scenario.turns else None

    def closing_text(self, closings: int) -> str:
        """What the model says when it ends its turn after `closings` earlier ends."""
        return self.scenario.closing(closings) if self.scenario.closing is not None else CLOSING

    def after_closing(self, k: int) -> str | None:
        """What the model read first after it ended its turn for the k-th time (from 1): the
        conversation items of the first request that carried k of its closings, past those of
        the first request that carried k - 1, as JSON text. None: no request carried it (the
        agent stopped there)."""
        with self.lock:
            now = next((s.conversation for s in self.seen if s.closings == k), None)
            before = next((s.conversation for s in self.seen if s.closings == k - 1), [])
        return None if now is None else json.dumps(now[len(before) :], ensure_ascii=False)

    def closings_read(self) -> int:
        """How many of its closings the model was sent back from (the most any request carried)."""
        with self.lock:
            return max((s.closings for s in self.seen), default=0)

    def commands_asked(self) -> int:
        """How many distinct calls the model asked for (retried requests counted once)."""
        with self.lock:
            return len({s.results for s in self.seen if s.results < self.scenario.turns})

    def news(self, call: int) -> str | None:
        """What the model read first after its call number `call` (from 1) came back: the
        conversation items of the first request that carried that call's result, past those of
        the request before it, as JSON text. None: no request carried it (the agent stopped)."""
        with self.lock:
            now = next((s.conversation for s in self.seen if s.results == call), None)
            before = next((s.conversation for s in self.seen if s.results == call - 1), [])
        return None if now is None else json.dumps(now[len(before) :], ensure_ascii=False)

    def requests(self) -> int:
        with self.lock:
            return len(self.seen)


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n")
    return "".join(out).encode()


def _text_only(content: Any) -> bool:
    """An assistant message of text and no tool call (Anthropic content: a string or blocks)."""
    if isinstance(content, str):
        return bool(content.strip())
    blocks = [b for b in content or [] if isinstance(b, dict)]
    return any(b.get("type") == "text" and (b.get("text") or "").strip() for b in blocks) and not any(
        b.get("type") == "tool_use" for b in blocks
    )


# ---------------------------------------------------------------- Anthropic (Claude Code)
def _anthropic(model: ScriptedModel, body: dict[str, Any]) -> tuple[bytes, str]:
    tools = [t.get("name") for t in body.get("tools") or []]
    results = sum(
        1
        for m in body.get("messages", [])
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )
    closings = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant" and _text_only(m.get("content")))
    command = model.answer(results) if "Bash" in tools else None
    if "Bash" in tools:
        with model.lock:
            model.seen.append(Seen(results, list(body.get("messages", [])), closings))
    usage = {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {
        "id": f"msg_{results}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    if command is not None:
        # a command, or another tool's call: {"tool": name, "input": {...}}
        name, arguments = (command["tool"], command["input"]) if isinstance(command, dict) else ("Bash", {"command": command})
        block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{results:04d}", "name": name, "input": {}}
        # a call marked "verbatim" goes as given: tools such as Edit take no description
        if not (isinstance(command, dict) and command.get("verbatim")):
            arguments = {**arguments, "description": "Run it"}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": model.closing_text(closings) if "Bash" in tools else "ok"}
        stop = "end_turn"
    if not body.get("stream"):
        full = dict(block)
        if command is not None:
            full["input"] = json.loads(delta["partial_json"])
        else:
            full["text"] = delta["text"]
        return json.dumps({**message, "content": [full], "stop_reason": stop}).encode(), "application/json"
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 10}},
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    ), "text/event-stream"


# ---------------------------------------------------------------- Gemini (Gemini CLI)
def _gemini(model: ScriptedModel, body: dict[str, Any], path: str) -> tuple[bytes, str]:
    tools = [
        d.get("name")
        for t in body.get("tools") or []
        for d in (t.get("functionDeclarations") or t.get("function_declarations") or [])
    ]
    results = sum(
        1 for c in body.get("contents", []) for p in c.get("parts") or [] if isinstance(p, dict) and "functionResponse" in p
    )
    main = "run_shell_command" in tools
    closings = sum(
        1
        for c in body.get("contents", [])
        if c.get("role") == "model"
        and any(isinstance(p, dict) and (p.get("text") or "").strip() and not p.get("thought") for p in c.get("parts") or [])
        and not any(isinstance(p, dict) and "functionCall" in p for p in c.get("parts") or [])
    )
    command = model.answer(results) if main else None
    if main:
        with model.lock:
            model.seen.append(Seen(results, list(body.get("contents", [])), closings))
    if isinstance(command, dict):  # another tool's call: {"tool": name, "input": {...}}
        parts: list[dict[str, Any]] = [{"functionCall": {"name": command["tool"], "args": command["input"]}}]
    elif command is not None:
        parts = [{"functionCall": {"name": "run_shell_command", "args": {"command": command}}}]
    else:
        parts = [{"text": model.closing_text(closings) if main else '{"reasoning": "scripted", "model_choice": "flash"}'}]
    chunk = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
        "modelVersion": "scripted",
    }
    if "alt=sse" in path:
        return _sse([(None, chunk)]), "text/event-stream"
    if ":streamGenerateContent" in path:
        return json.dumps([chunk]).encode(), "application/json"
    if ":countTokens" in path:
        return json.dumps({"totalTokens": 100}).encode(), "application/json"
    return json.dumps(chunk).encode(), "application/json"


# ---------------------------------------------------------------- OpenAI Responses (Codex)
def _responses(model: ScriptedModel, body: dict[str, Any]) -> tuple[bytes, str]:
    tools = {t.get("name"): t for t in body.get("tools") or [] if isinstance(t, dict)}
    shell = next((name for name in ("exec_command", "shell_command", "shell") if name in tools), None)
    results = sum(
        1
        for item in body.get("input") or []
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output")
    )
    closings = sum(
        1
        for item in body.get("input") or []
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "assistant"
    )
    command = model.answer(results) if shell else None
    if shell:
        with model.lock:
            model.seen.append(Seen(results, list(body.get("input") or []), closings))
    rid = f"resp_{results}"
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": {"id": rid}}),
    ]
    if command is not None:
        name: str | None = shell
        args: dict[str, Any] = {}
        if isinstance(command, dict):  # another tool's call, or the shell's with more arguments
            name, args = command["tool"], command["input"]
        elif shell == "exec_command":
            args = {"cmd": command}
        elif shell == "shell_command":
            args = {"command": command}
        else:
            args = {"command": ["bash", "-lc", command]}
        item = {
            "type": "function_call",
            "id": f"fc_{results}",
            "call_id": f"call_{results:04d}",
            "name": name,
            "arguments": json.dumps(args),
        }
    else:
        item = {
            "type": "message",
            "id": f"msg_{results}",
            "role": "assistant",
            "content": [{"type": "output_text", "text": model.closing_text(closings) if shell else "ok", "annotations": []}],
        }
    events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}))
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 110,
    }
    events.append(("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}}))
    return _sse(events), "text/event-stream"


@contextlib.contextmanager
def serving(model: ScriptedModel) -> Iterator[str]:
    """The model on a loopback port of its own: yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            path = self.path
            if "/messages" in path and "count_tokens" not in path:
                out, kind = _anthropic(model, body)
            elif "/models/" in path and (
                ":generateContent" in path or ":streamGenerateContent" in path or ":countTokens" in path
            ):
                out, kind = _gemini(model, body, path)
            elif path.rstrip("/").endswith("/responses"):
                out, kind = _responses(model, body)
            elif "count_tokens" in path:
                out, kind = json.dumps({"input_tokens": 100}).encode(), "application/json"
            else:
                with model.lock:
                    model.other.append(path)
                out, kind = b'{"error": {"message": "not scripted"}}', "application/json"
                self.send_response(404)
                self._finish(out, kind)
                return
            self.send_response(200)
            self._finish(out, kind)

        def do_GET(self) -> None:
            with model.lock:
                model.other.append(self.path)
            self.send_response(404)
            self._finish(b'{"error": {"message": "not scripted"}}', "application/json")

        def _finish(self, out: bytes, kind: str) -> None:
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
