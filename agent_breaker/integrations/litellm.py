"""The guard as a LiteLLM guardrail: one object for the SDK (`litellm.callbacks = [guard]`, on
`litellm.acompletion`) and for the proxy (config.yaml `guardrails:`, mode pre_call and post_call).

Each request belongs to the run named in its metadata (`run_id`, else `session_id`, in
`metadata` or `litellm_metadata`; else `litellm_session_id`); without one, to its conversation,
known by its opening (the messages up to the first user message: a client resends the whole
conversation each turn). A conversation stays in the run it started in: once the model has
answered (its first answer's tool call ids belong to no other conversation), a request that
continues it under another run id is taken as the first run's (this process remembers the
latest MAX_CONVERSATIONS), so a fresh run id per retry does not make each retry a new session.
Behind the proxy the tenant is the API key's team (a key without a team is a tenant of its own), never
what the caller sends; in the SDK, `metadata["tenant"]`.

Before the model call: what follows the model's last message in the request is new (a client
resends the whole conversation), so the tool messages there are recorded as the results of the
model's latest tool calls; then `Engine.check_model_call`. User messages are not recorded as
user turns: through LiteLLM the agent's own code writes them, and a user turn would lift a loop
halt or resume a session frozen for a human.
A session that is frozen for a human, halted, or over a ceiling is refused with HTTP 429
(`litellm.RateLimitError`, the reason in its message).

After it: the turn's spend, from LiteLLM's own cost accounting and the response's usage, is
counted once (on its first tool call, or on the turn when it calls none), and each tool call is
checked before the client sees it. A refused call is taken out of the response and its
observation (JSON) appended to the message's content: the client cannot run it, and reads why.
A streamed answer's tool calls would reach the client unchecked: a guarded run's streamed
requests are refused (400).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from .._extras import require

require("litellm", "litellm", "agent_breaker.integrations.litellm")

import litellm  # noqa: E402
from litellm.exceptions import BadRequestError, RateLimitError  # noqa: E402  # litellm re-exports them implicitly
from litellm.integrations.custom_guardrail import CustomGuardrail  # noqa: E402
from litellm.types.guardrails import GuardrailEventHooks  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from .. import heuristics as H  # noqa: E402
from .._aio import without_blocking  # noqa: E402
from .._openai_format import latest_tool_calls, parse_tool_call, read_tool_output, tool_names  # noqa: E402
from ..config import load_config  # noqa: E402
from ..dispatch import Decision, decide_event  # noqa: E402
from ..engine import Engine  # noqa: E402
from ..events import is_id  # noqa: E402
from ..verdicts import Verdict, observation  # noqa: E402

log = logging.getLogger("agent_breaker.integrations.litellm")

#: where a request names its run, in this order, in each metadata bucket
RUN_KEYS = ("run_id", "session_id")
#: conversations whose first run this process remembers (the newest)
MAX_CONVERSATIONS = 100_000
#: the hooks the guard runs on (its default mode)
MODES = (GuardrailEventHooks.pre_call, GuardrailEventHooks.post_call)
#: the call types whose requests are chat messages
_CHAT = frozenset({"completion", "acompletion"})
_R = TypeVar("_R")


class AgentBreakerGuardrail(CustomGuardrail):
    """The guard on LiteLLM's model calls. `engine`: the engine to decide with (the proxy builds
    one from `config_path`, or from the shipped defaults). The proxy passes the guardrail's
    name, mode and `default_on` from its config, and every other `litellm_params` key as a
    keyword (`config_path` is ours; the rest go to LiteLLM's base class)."""

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        config_path: str | None = None,
        guardrail_name: str = "agent-breaker",
        event_hook: Any = None,
        default_on: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            guardrail_name=guardrail_name,
            supported_event_hooks=list(MODES),
            event_hook=list(MODES) if event_hook is None else event_hook,
            default_on=default_on,
            **kwargs,
        )
        self.engine = engine or Engine(load_config(config_path) if config_path else None)
        self._runs: OrderedDict[str, str] = OrderedDict()  # an answered conversation's start -> its first run

    # ----------------------------------------------------------------- the proxy's hooks
    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str) -> None:
        if _chat(call_type):
            await self._before(data, user_api_key_dict)

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any, response: Any) -> Any:
        return await self._after(data, response, user_api_key_dict)

    # ----------------------------------------------------------------- the SDK's hooks
    # `litellm.acompletion` runs these for every callback. Behind the proxy they run too (its
    # router calls `acompletion`), but there the proxy has run the hooks above already.
    async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> dict[str, Any]:
        if not _behind_proxy(kwargs) and _chat(call_type) and self.should_run_guardrail(kwargs, GuardrailEventHooks.pre_call):
            await self._before(kwargs)
        return kwargs

    async def async_post_call_success_deployment_hook(self, request_data: dict[str, Any], response: Any, call_type: Any) -> Any:
        if _behind_proxy(request_data) or not _chat(call_type):
            return None
        if not self.should_run_guardrail(request_data, GuardrailEventHooks.post_call):
            return None
        return await self._after(request_data, response)

    # ----------------------------------------------------------------- deciding
    async def _before(self, data: Mapping[str, Any], key: Any = None) -> None:
        ids = _run_of(data, key, runs=self._runs)
        if ids is None:
            return
        if data.get("stream"):
            # a streamed answer's tool calls reach the client before the guard could see them
            raise BadRequestError(
                message="agent-breaker cannot check a streamed answer's tool calls: send a guarded run's requests unstreamed",
                model=str(data.get("model") or ""),
                llm_provider="agent-breaker",
            )
        for result in _new_results(_plain(list(data.get("messages") or ())), ids):
            await self._record(result)
        # a model call is no event of the protocol: the engine's own question, asked directly
        verdict: Verdict = await without_blocking(self.engine, self.engine.check_model_call, ids)
        if not verdict.allowed:
            raise RateLimitError(
                message=f"agent-breaker refused this model call ({verdict.heuristic}): {verdict.reason}",
                llm_provider="agent-breaker",
                model=str(data.get("model") or ""),
            )

    async def _after(self, data: Mapping[str, Any], response: Any, key: Any = None) -> Any:
        if not isinstance(response, litellm.ModelResponse):
            return response
        reply = response.choices[0].message if response.choices else None
        ids = _run_of(data, key, reply=reply, runs=self._runs)
        if ids is None:
            return response
        spend = _spend(response)  # counted once: on the first call the engine reads, else on the turn
        for choice in response.choices:
            message = choice.message
            if not message.tool_calls:
                continue
            kept: list[Any] = []
            refused: list[Any] = []  # observations: refusals, and the warnings kept calls run under
            turn = getattr(response, "id", None) or uuid.uuid4().hex  # the calls of one answer share it
            for tool_call in message.tool_calls:
                name, args, call_id = parse_tool_call(_plain(tool_call))
                event = {"type": "tool_call", **ids, "tool": name, "args": args, "call_id": call_id, "turn": str(turn), **spend}
                if message.content:
                    event["thought"] = message.content
                decision = await self._decide(event)
                if decision.invalid is not None:  # not a call anyone can run: refused, saying why to the model
                    fix = "Call the tool again by its name, with a JSON object of arguments."
                    refused.append(observation(H.INVALID_EVENT, name, str(decision.invalid), fix, None))
                    continue
                verdict = decision.verdict
                assert isinstance(verdict, Verdict)
                spend = {}
                if verdict.allowed:
                    kept.append(tool_call)
                if not verdict.allowed or verdict.advisory:
                    refused.append(verdict.observation)
            if refused:
                message.tool_calls = kept or None
                message.content = "\n\n".join([message.content or "", *map(json.dumps, refused)]).lstrip()
                if not kept and choice.finish_reason == "tool_calls":
                    choice.finish_reason = "stop"
        if spend:
            text = response.choices[0].message.content if response.choices else ""
            await self._record({"type": "assistant", **ids, "text": text or "", **spend})
        return response

    async def _record(self, event: dict[str, Any]) -> None:
        """What the conversation says happened: a result or a turn the guard cannot read (too
        big, too deep) is logged, and the request goes on."""
        decision = await self._decide(event)
        if decision.invalid is not None:
            log.warning(
                "agent-breaker: a %s of session %r was not recorded: %s", event["type"], event["session"], decision.invalid
            )

    async def _decide(self, event: dict[str, Any]) -> Decision:
        return await without_blocking(self.engine, decide_event, self.engine, event)


def _chat(call_type: Any) -> bool:
    """A chat completion's call type (a string from the proxy, LiteLLM's CallTypes in the SDK)."""
    return getattr(call_type, "value", call_type) in _CHAT


def _behind_proxy(data: Mapping[str, Any]) -> bool:
    """The proxy stamps every request it serves with the HTTP request it came in."""
    return data.get("proxy_server_request") is not None


def _start_of(messages: list[Any], until: str) -> str | None:
    """A digest of a conversation's messages up to and including its first of role `until`."""
    start = []
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        start.append([m.get("role"), m.get("content"), m.get("tool_calls")])
        if m.get("role") == until:
            text = json.dumps(start, sort_keys=True, default=str)
            return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return None


def _run_of(
    data: Mapping[str, Any], key: Any = None, *, reply: Any = None, runs: OrderedDict[str, str] | None = None
) -> dict[str, Any] | None:
    """The session (or conversation) and tenant fields of a request's events; None when the
    request names no run and has no user message. `key`: the proxy's authenticated API key
    (UserAPIKeyAuth); `reply`: the model's answer to the request, once there is one; `runs`:
    the run each answered conversation started in, by its start."""
    buckets = [b for b in (data.get("metadata"), data.get("litellm_metadata")) if isinstance(b, Mapping)]
    run = next((b[k] for b in buckets for k in RUN_KEYS if b.get(k)), None) or data.get("litellm_session_id")
    messages = _plain(list(data.get("messages") or ()))
    conversation = None
    if run and runs is not None:
        started = _start_of(messages + ([_plain(reply)] if reply is not None else []), "assistant")
        if started is not None:
            run = runs.setdefault(started, str(run))
            runs.move_to_end(started)
            while len(runs) > MAX_CONVERSATIONS:
                runs.popitem(last=False)
    elif not run:
        conversation = _start_of(messages, "user")
        if conversation is None:
            return None
    if _behind_proxy(data):
        # the key the proxy authenticated, never the caller's word: its team, else the key itself
        # (keys without a team must not share each other's runs)
        team, token = getattr(key, "team_id", None), getattr(key, "token", None)
        tenant = team or (f"key-{token}" if token else None)
    else:
        tenant = next((b["tenant"] for b in buckets if b.get("tenant")), None)
    ids = ({"session": str(run)} if run else {}) | ({} if tenant is None else {"tenant": str(tenant)})
    for field, value in ids.items():
        if not is_id(value):
            raise BadRequestError(
                message=f"agent-breaker: the run's {field} must be 1 to 256 printable characters",
                model=str(data.get("model") or ""),
                llm_provider="agent-breaker",
            )
    return ids if conversation is None else ids | {"conversation": conversation}


def _new_results(messages: list[Mapping[str, Any]], ids: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The results of what follows the model's last message: the tool messages answering its
    latest tool calls."""
    start = next((i + 1 for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), 0)
    names = tool_names(latest_tool_calls(messages))
    for message in messages[start:]:
        call_id = message.get("tool_call_id")
        if message.get("role") == "tool" and call_id in names:
            out = read_tool_output(message.get("content"))
            result = {
                "type": "tool_result",
                **ids,
                "tool": names[call_id],
                "call_id": call_id,
                "ok": out.ok,
                "result": out.result,
            }
            yield result | ({} if out.ok else {"error": out.error})


def _plain(value: Any) -> Any:
    """LiteLLM's (or the openai SDK's) message and tool call objects, wherever a client left them
    in the conversation, as the dicts of the OpenAI format."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _spend(response: Any) -> dict[str, Any]:
    """The model turn's spend as event fields: its usage, and its cost by LiteLLM."""
    usage = getattr(response, "usage", None)
    spend: dict[str, Any] = {
        "input_tokens": getattr(usage, "prompt_tokens", None) or 0,
        "output_tokens": getattr(usage, "completion_tokens", None) or 0,
    }
    cost = _cost(response)
    if cost is not None:
        spend["cost_usd"] = cost
    if response.model:
        spend["model"] = response.model
    return spend


def _cost(response: Any) -> float | None:
    """LiteLLM's price of the response: the cost it logged (the proxy's, with the deployment's
    own pricing), else worked out now (the SDK's hook runs before LiteLLM logs it). None for a
    model LiteLLM cannot price: the engine then prices its tokens by `budget.prices`."""
    logged = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    if logged is not None:
        return float(logged)
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # LiteLLM raises for a model it has no price for
        return None


__all__ = ["MODES", "RUN_KEYS", "AgentBreakerGuardrail"]
