"""Coding agents' hooks: what Claude Code, Codex and Gemini CLI send before and after each tool
call, read as the guard's events, and its verdicts answered in each agent's own format.

Pure: no I/O, no server, no store. Every transport (the hook command, its daemon, the hook
endpoints) reads an input with `read(agent, raw, fail_closed=...)`: the same limits, and the same
answer to what it cannot decide. It gives a `Hook` (the protocol's event to decide, as the
gateway endpoints take it) or, when there is nothing to decide, the `HookAnswer` itself: a hook
that asks nothing of the guard is allowed; an input the guard cannot read (not JSON, not a hook
input it knows, over MAX_INPUT_BYTES) is answered by the fail policy (`undecided`); one nested
too deep to read is refused, like a call whose arguments nest too deep for the engine.
`answer(hook, verdict)`, given the verdict event, gives the `HookAnswer`: the JSON the agent reads
on stdout (or in an HTTP hook's response body), and for a command hook the exit code and stderr.
A refused call is exit code 2 with the reason on stderr, which all three agents read as
"blocked, tell the model why"; a warning of the graduated answer reaches the model as
additional context.

Fields the guard does not use are ignored, so newer agent versions keep working. The session
is the agent's `session_id` (a subagent's own calls, named by `agent_id`, are a session of
their own: its loops are not the parent's); the call id is `tool_use_id` (Gemini CLI sends
none: the engine pairs a result with the oldest unanswered call of its tool).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import AgentBreakerError
from .._hook_contract import AGENTS as AGENTS
from .._hook_contract import BLOCK_EXIT as BLOCK_EXIT
from .._hook_contract import CLAUDE_CODE as CLAUDE_CODE
from .._hook_contract import CODEX as CODEX
from .._hook_contract import GEMINI_CLI as GEMINI_CLI
from .._hook_contract import MAX_INPUT_BYTES as MAX_INPUT_BYTES
from .._text import normalize_name, reported_exit
from ..heuristics import DONE_CLAIM, INVALID_EVENT
from ..protocol import BY_NAME, TOOL_CALL_EVENT, TOOL_RESULT_EVENT

USER_EVENT = BY_NAME["user"].colang
FINAL_EVENT = BY_NAME["final"].colang

# a hook event's name where it is a key of the input (inside a string its quotes are escaped)
_EVENT_NAME = re.compile(rb'"hook_event_name"\s*:\s*"([A-Za-z]+)"')

# hook event names -> what the guard decides
_BEFORE = {"PreToolUse", "BeforeTool"}
_AFTER = {"PostToolUse", "AfterTool"}
_FAILED = {"PostToolUseFailure"}
_USER = {"UserPromptSubmit", "BeforeAgent"}
# the end of a turn: the agent's last message, checked against what its tools did (done_claim)
_STOP = {"Stop", "SubagentStop", "AfterAgent"}
# where each agent sends its last message: Claude Code and Codex `last_assistant_message`, Gemini
# CLI `prompt_response` (all the model's text for the prompt)
_LAST_MESSAGE = ("last_assistant_message", "prompt_response")
#: result fields that carry an exit status
_EXIT_KEYS = ("exit_code", "exitCode", "returncode", "return_code")


class HookInputError(AgentBreakerError, ValueError):
    """A hook input the guard cannot read; the message says which field."""


class GuardFailure(AgentBreakerError, RuntimeError):
    """The guard could not decide (a state it cannot write, a server that does not answer);
    the fail policy answers instead."""


@dataclass(frozen=True)
class Hook:
    """One hook call: the agent, its hook event's name, and the protocol event to decide (None:
    nothing to decide, the answer allows)."""

    agent: str
    name: str
    event: dict[str, Any] | None
    # the agent's transcript of the session (where a call's token usage may be read, and a
    # prompt checked against what the agent itself recorded)
    transcript: str | None = None
    # the turn a prompt begins, as the agent names it (Codex's `turn_id`)
    turn: str | None = None


@dataclass(frozen=True)
class HookAnswer:
    """What the agent gets: `output` as JSON on stdout (None: print nothing), and for a command
    hook its exit code and stderr."""

    output: dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0
    stderr: str = ""

    @property
    def denied(self) -> bool:
        return self.exit_code == BLOCK_EXIT or refusal(self.output) is not None

    def printed(self) -> tuple[int, str, str]:
        """What the command prints of it: (exit code, stderr, stdout). A refusal prints no
        JSON: the agent reads its reason on stderr."""
        return self.exit_code, self.stderr, "" if self.exit_code == BLOCK_EXIT else json.dumps(self.output) + "\n"


def _text(payload: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = payload.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise HookInputError(f"{name}: a non-empty string is required")
    return value


def read_hook(agent: str, payload: Any) -> Hook:
    """The engine event one hook input asks the guard to decide (HookInputError if unreadable)."""
    if agent not in AGENTS:
        raise HookInputError(f"unknown agent {agent!r}; one of {', '.join(AGENTS)}")
    if not isinstance(payload, Mapping):
        raise HookInputError("the hook input must be a JSON object")
    name = _text(payload, "hook_event_name")
    assert name is not None
    if name not in _BEFORE | _AFTER | _FAILED | _USER | _STOP:
        return Hook(agent, name, None)  # SessionStart, Notification...: nothing to decide
    session = _text(payload, "session_id")
    subagent = payload.get("agent_id")
    base: dict[str, Any] = {"session_id": session}
    if isinstance(subagent, str) and subagent:
        # a session of its own (its loops are not the parent's), whose failing calls' streaks
        # are the family's
        base.update(session_id=f"{session}/{subagent}", parent_session_id=session)
    named = payload.get("transcript_path")
    transcript = named if isinstance(named, str) and named else None
    if name in _STOP:
        said = next((v for k in _LAST_MESSAGE if isinstance(v := payload.get(k), str) and v.strip()), None)
        if said is None:
            return Hook(agent, name, None)  # a turn that ends with no message claims nothing
        # the agent's own flag that a stop hook already sent it back to work in this turn
        continued = payload.get("stop_hook_active") is True
        return Hook(agent, name, {**base, "type": FINAL_EVENT, "text": said, "continued": continued}, transcript)
    if name in _USER:
        prompt, turn = payload.get("prompt"), payload.get("turn_id")
        event = {**base, "type": USER_EVENT, "text": prompt if isinstance(prompt, str) else ""}
        return Hook(agent, name, event, transcript, turn if isinstance(turn, str) and turn else None)
    base["tool_name"] = _text(payload, "tool_name")
    call_id = _text(payload, "tool_use_id", required=False)
    if call_id is not None:
        base["call_id"] = call_id
    if name in _BEFORE:
        args = payload.get("tool_input")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            raise HookInputError("tool_input: an object is required")
        # an agent sends no result for a call the user declined or interrupted, or without a
        # PostToolUse hook: its calls in flight never hold up the next
        event = {**base, "type": TOOL_CALL_EVENT, "tool_args": dict(args), "result_promised": False}
        return Hook(agent, name, event, transcript)
    if name in _FAILED:
        # whether the user stopped it is the harness's flag, never the error's text (the tool's)
        stopped = payload.get("is_interrupt") is True
        # its head and its tail: a command's error ends with its output's summary ("1 failed")
        said = _ends(payload.get("error")) or "the tool failed"
        return Hook(agent, name, {**base, "type": TOOL_RESULT_EVENT, "ok": False, "error": said, "interrupted": stopped})
    response = payload.get("tool_response")
    error = failure(response)
    result = {**base, "type": TOOL_RESULT_EVENT, "ok": error is None, "result": response}
    return Hook(agent, name, {**result, "error": error} if error is not None else result)


def users_turn(hook: Hook, in_flight: Mapping[str, str], recorded: Callable[[Hook, Mapping[str, str]], bool] | None) -> bool:
    """Whether a prompt hook is the user's turn, which restarts loop streaks and lifts a loop's
    halt; a prompt that is not is let through and restarts nothing. The agent's shell can run
    this hook itself (`echo '{"hook_event_name": "UserPromptSubmit", ...}' | agent-breaker hook`),
    but only while one of its calls runs: a call of the session `in_flight` at the guard says
    the turn is the agent's. Where the agent's own record of the session can be read
    (`recorded(hook, in_flight)`: its transcript, on the command path), it must show the session
    waiting for its user too."""
    assert hook.event is not None and hook.event["type"] == USER_EVENT
    if recorded is not None:
        return hook.transcript is not None and recorded(hook, in_flight)
    return not in_flight


def read(agent: str, raw: bytes, *, fail_closed: bool) -> Hook | HookAnswer:
    """A hook input as every transport reads it: the `Hook` to decide, or the answer when there
    is nothing to decide (see the module's docstring)."""
    if len(raw) > MAX_INPUT_BYTES:
        return oversized(raw)
    try:
        hook = read_hook(agent, _parsed(raw))
    except RecursionError:
        # only a tool's arguments nest like this (the agent writes the rest): the guard is not
        # nested out of deciding, as the engine refuses arguments deeper than it reads
        return refused(f"agent-breaker ({INVALID_EVENT}): the hook input is nested too deep to read; blocked")
    except HookInputError as exc:
        return undecided(str(exc), fail_closed=fail_closed)
    return HookAnswer() if hook.event is None else hook


def hook_of(agent: str, raw: bytes) -> Hook | None:
    """The hook an input holds, where it can be read (to tell a call from a result or a prompt
    when the guard could not decide it)."""
    found = read(agent, raw, fail_closed=False)
    return found if isinstance(found, Hook) else None


def oversized(head: bytes) -> HookAnswer:
    """The answer to an input over MAX_INPUT_BYTES, decided on what can be read of it (`head`,
    its start; b"" when none was read): a call is refused, whatever the fail policy, since its
    arguments cannot be checked (nor a session's halt told from a decoy); a result or a prompt
    is let through unread (the tool ran; a prompt decides nothing). Which it is, is read from
    the event names in `head`: any call's name, or none found, is a call."""
    names = {m.group(1).decode() for m in _EVENT_NAME.finditer(head)}
    why = f"the hook input is over {MAX_INPUT_BYTES} bytes, more than the guard reads"
    if not names or names & _BEFORE:
        return refused(f"agent-breaker ({INVALID_EVENT}): {why}; blocked")
    return HookAnswer({}, 0, f"agent-breaker: {why}; not checked")


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise HookInputError("the hook input is not JSON") from None


def undecided(why: str, *, fail_closed: bool, hook: Hook | None = None) -> HookAnswer:
    """The fail policy's answer when the guard cannot decide (an input it cannot read, a store
    or server it cannot reach, a crash): `--fail closed` blocks the call, `--fail open` lets it
    go ahead; either way the agent's stderr (the server's log, on an endpoint) says why. Only a
    tool call (or an input not known to be anything else) is blocked: a blocked result changes
    nothing (the tool ran), and a blocked prompt would lock the user out of the session while
    the calls it leads to are blocked anyway."""
    if fail_closed and (hook is None or hook.event is None or hook.event["type"] == TOOL_CALL_EVENT):
        return refused(f"agent-breaker could not check this call ({why}); blocked, as --fail closed asks")
    return HookAnswer({}, 0, f"agent-breaker could not check this call ({why}); let through, as --fail open asks")


def not_taken(hook: Hook, why: str) -> HookAnswer:
    """The answer to a hook whose event the guard will not take (`why`): a call is refused, so
    that what cannot be checked does not run; a result or a prompt decides nothing."""
    if hook.event is not None and hook.event["type"] == TOOL_CALL_EVENT:
        return refused(f"agent-breaker ({INVALID_EVENT}): the guard cannot take this call ({why}); blocked")
    return HookAnswer({}, 0, f"agent-breaker could not take this event ({why})")


def refusal(output: Mapping[str, Any]) -> str | None:
    """The reason of a refusal in an agent's JSON answer, or None."""
    if output.get("decision") in ("deny", "block"):
        return str(output.get("reason") or "blocked by agent-breaker")
    specific = output.get("hookSpecificOutput")
    if isinstance(specific, Mapping) and specific.get("permissionDecision") == "deny":
        return str(specific.get("permissionDecisionReason") or "blocked by agent-breaker")
    return None


def refused(text: str) -> HookAnswer:
    """A refusal that needs no hook event's name: exit 2 for a command hook (every agent reads
    it as blocked), and in JSON a top-level "block" decision (what Claude Code's HTTP hook reads
    as blocked, and the command reads back from a server)."""
    return HookAnswer({"decision": "block", "reason": text}, BLOCK_EXIT, text)


def failure(response: Any) -> str | None:
    """Why a tool's response says it failed (an error, an error flag, a non-zero exit status),
    or None when it reads as a success."""
    if isinstance(response, Mapping):
        for key in ("error", "stderr_error"):
            if response.get(key):
                return _short(response[key])
        if response.get("is_error") is True or response.get("isError") is True:
            return _short(response.get("content")) or "the tool reported an error"
        if response.get("success") is False:
            return "the tool reported no success"
        for key in _EXIT_KEYS:
            status = response.get(key)
            if isinstance(status, int) and not isinstance(status, bool) and status != 0:
                return f"exit code {status}"
        if response.get("interrupted") is True:
            return "the command was interrupted"
        for key in ("output", "llmContent", "stdout"):
            if isinstance(response.get(key), str):
                status = reported_exit(response[key])
                if status:
                    return f"exit code {status}"
        return None
    if isinstance(response, str):
        status = reported_exit(response)
        return f"exit code {status}" if status else None
    return None


def _ends(value: Any, head: int = 200, tail: int = 300) -> str:
    text = _short(value, limit=1 << 30)
    return text if len(text) <= head + tail else f"{text[:head]}\n...\n{text[-tail:]}"


def _short(value: Any, limit: int = 500) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return text[:limit]


def message(verdict: Mapping[str, Any], tool: str | None = None) -> str:
    """What the model reads: the heuristic, the reason, and what to do instead; the tool named
    as the agent spells it (`tool`: the engine compares names case-folded)."""
    instruction = (verdict.get("observation") or {}).get("actionable_instruction")
    head = f"agent-breaker ({verdict.get('heuristic')}): {verdict.get('reason') or ''}".rstrip()
    text = (
        head if not instruction else f"{head} {instruction}" if head.endswith((".", "!", "?", ":")) else f"{head}. {instruction}"
    )
    folded = normalize_name(tool) if tool else None
    if not folded or folded == tool:
        return text
    return re.sub(rf"(?<![\w.-]){re.escape(folded)}(?![\w-])", lambda _: tool or "", text)


def answer(hook: Hook, verdict: Mapping[str, Any] | None) -> HookAnswer:
    """The agent's answer to `hook`, given the verdict event the guard decided (None: nothing
    was decided)."""
    if verdict is None or hook.event is None:
        return HookAnswer()
    tool = hook.event.get("tool_name")
    if hook.event["type"] == TOOL_RESULT_EVENT:
        return _after(hook, verdict, tool)
    if hook.event["type"] == FINAL_EVENT:
        return _stop(hook, verdict)
    if not verdict.get("heuristic"):
        return HookAnswer()
    text = message(verdict, tool)
    if verdict.get("allowed"):
        # a warning: the call runs. Gemini CLI reads no context before a call: it comes with
        # the call's answer (`_after`)
        return HookAnswer() if hook.agent == GEMINI_CLI else _context(hook, text)

    if hook.agent == GEMINI_CLI:
        # Gemini CLI reads the JSON whatever the exit code, and logs any exit but 0 as a failed
        # hook: a refusal it reads as one exits 0
        return HookAnswer({"decision": "deny", "reason": text})
    if hook.event["type"] == USER_EVENT:
        # a prompt to a halted session: blocked, the user reads why
        return HookAnswer({"decision": "block", "reason": text}, BLOCK_EXIT, text)
    output = {"hookSpecificOutput": {"hookEventName": hook.name, "permissionDecision": "deny", "permissionDecisionReason": text}}
    return HookAnswer(output, BLOCK_EXIT, text)


def _after(hook: Hook, verdict: Mapping[str, Any], tool: str | None) -> HookAnswer:
    """A result is recorded, never refused: what looks wrong reaches the model as context. A
    result the guard awaited no call for (one it forgot, or a call another hook declined) is no
    news to the model. Gemini CLI reads context after a call only: the warning the call was let
    through with comes with its answer."""
    said = []
    warning = verdict.get("warning")
    if hook.agent == GEMINI_CLI and warning:
        said.append(
            message(
                {"heuristic": str(warning.get("warning", "")).lower(), "reason": warning.get("message"), "observation": warning},
                tool,
            )
        )
    if verdict.get("heuristic") and verdict["heuristic"] != INVALID_EVENT:
        said.append(message(verdict, tool))
    return _context(hook, "\n".join(said)) if said else HookAnswer()


def _stop(hook: Hook, verdict: Mapping[str, Any]) -> HookAnswer:
    """The answer to the end of a turn: a refused stop sends the agent back to work with the
    reason (Claude Code and Codex: exit 2, the reason on stderr, or a "block" decision in JSON;
    Gemini CLI: a "deny" decision, which it sends back as the agent's next prompt). A claim let
    through unsupported (the turn's refusals spent) stops, and the user is told."""
    if not verdict.get("heuristic"):
        return HookAnswer()
    text = message(verdict)
    if verdict.get("accepted") or verdict.get("allowed"):
        # a claim let through unsupported: the user reads it (another heuristic's report, no one)
        return HookAnswer({"systemMessage": text}) if verdict["heuristic"] == DONE_CLAIM else HookAnswer()
    if hook.agent == GEMINI_CLI:
        return HookAnswer({"decision": "deny", "reason": text})
    return refused(text)


def _context(hook: Hook, text: str) -> HookAnswer:
    return HookAnswer({"hookSpecificOutput": {"hookEventName": hook.name, "additionalContext": text}})


#: the hook events each agent sends the guard, and how its settings match every tool
_SETTINGS = {
    CLAUDE_CODE: (("PreToolUse", "PostToolUse", "PostToolUseFailure"), ("UserPromptSubmit", "Stop", "SubagentStop"), "*"),
    CODEX: (("PreToolUse", "PostToolUse"), ("UserPromptSubmit", "Stop"), ".*"),
    GEMINI_CLI: (("BeforeTool", "AfterTool"), ("BeforeAgent", "AfterAgent"), ".*"),
}


def settings(agent: str, *, server: str | None = None, fail: str = "open", command: str = "agent-breaker") -> dict[str, Any]:
    """The `hooks` settings that send `agent`'s tool calls to the guard: an HTTP hook to a server
    (Claude Code, given `server`), else the `agent-breaker hook` command (with `--server` for the
    agents that run commands only); `command` is how the agent's shell starts `agent-breaker`."""
    if agent not in _SETTINGS:
        raise HookInputError(f"unknown agent {agent!r}; one of {', '.join(AGENTS)}")
    tool_events, turn_events, every_tool = _SETTINGS[agent]
    handler: dict[str, Any]
    if server is not None and agent == CLAUDE_CODE and fail == "open":
        # Claude Code lets a call through when an HTTP hook gets no answer, whatever the settings:
        # an HTTP hook can only fail open, so failing closed takes the command with --server
        handler = {
            "type": "http",
            "url": f"{server.rstrip('/')}/v1/hooks/{agent}",
            # the hooks' own token (the server's $AGENT_BREAKER_HOOK_TOKEN): the agent's shell
            # inherits it, and a prompt sent with it restarts nothing
            "headers": {"Authorization": "Bearer $AGENT_BREAKER_HOOK_TOKEN"},
            "allowedEnvVars": ["AGENT_BREAKER_HOOK_TOKEN"],
            "timeout": 5,
        }
    else:
        line = (
            f"{command} hook {agent}"
            + (f" --server {shlex.quote(server)}" if server else "")
            + (" --fail closed" if fail == "closed" else "")
        )
        handler = {"type": "command", "command": line}  # each agent's own time-out (their units differ)
    hooks: dict[str, Any] = {name: [{"matcher": every_tool, "hooks": [handler]}] for name in tool_events}
    hooks.update({name: [{"hooks": [handler]}] for name in turn_events})
    return {"hooks": hooks}


#: Codex's timeout of a command hook that names none, in seconds (part of what it hashes)
CODEX_DEFAULT_TIMEOUT_S = 600


def codex_trust(hooks: Mapping[str, Any], hooks_file: str) -> str:
    """The `config.toml` lines that trust each hook of `hooks` (as `settings` gives them) once
    they are in `hooks_file` (an absolute path): Codex runs a hook only when the config holds
    the hash of what the hook is (`[hooks.state."<file>:<event>:<group>:<handler>"]
    trusted_hash`), and skips any other without a word. The hash is Codex's: SHA-256 of the
    hook's identity as compact JSON with sorted keys."""
    lines = []
    for event, groups in hooks["hooks"].items():
        label = re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()  # PreToolUse -> pre_tool_use
        for g, group in enumerate(groups):
            for h, handler in enumerate(group["hooks"]):
                identity: dict[str, Any] = {
                    "event_name": label,
                    "hooks": [
                        {
                            "type": handler["type"],
                            "command": handler["command"],
                            "timeout": handler.get("timeout", CODEX_DEFAULT_TIMEOUT_S),
                            "async": False,
                        }
                    ],
                }
                if "matcher" in group and event not in ("UserPromptSubmit", "Stop"):  # Codex ignores their matcher
                    identity["matcher"] = group["matcher"]
                digest = hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
                key = json.dumps(f"{hooks_file}:{label}:{g}:{h}")  # a TOML basic string
                lines += [f"[hooks.state.{key}]", f'trusted_hash = "sha256:{digest}"', ""]
    return "\n".join(lines)
