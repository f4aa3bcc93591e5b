"""The LiteLLM guardrail: LiteLLM's real completion path (`litellm.acompletion`, its callbacks and
cost accounting) with scripted replies (`mock_response`, `mock_tool_calls`). Before a model
call: the new tool results and user turn are recorded, and a session that cannot make another
step is refused with HTTP 429; after it: the turn's spend is counted from LiteLLM's cost, and a
refused tool call never reaches the client. Also `Engine.check_model_call` itself, on both stores."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM's bundled prices: no fetch at import

import asyncio
import importlib.util
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import CALL_ERROR, call, run

from agent_breaker import Engine, ReceiptKeys
from agent_breaker.escalations import SqliteEscalations

litellm = pytest.importorskip("litellm")

from litellm.proxy._types import UserAPIKeyAuth  # noqa: E402

from agent_breaker.integrations.litellm import AgentBreakerGuardrail  # noqa: E402

MODEL = "gpt-4o-mini"  # in LiteLLM's local cost map
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "litellm_agent.py"
SQL = {"query": "SELEC count(*) FROM orders"}


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("litellm_agent_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _example()


@pytest.fixture
def use_guard():
    """Put a guard on an engine into `litellm.callbacks` for one test."""
    saved = litellm.callbacks

    def use(engine: Engine, **kwargs: Any) -> AgentBreakerGuardrail:
        guard = AgentBreakerGuardrail(engine, **kwargs)
        litellm.callbacks = [guard]
        return guard

    yield use
    litellm.callbacks = saved


@pytest.fixture
def memory_engine(clock):
    def make(config: dict[str, Any] | None = None, **kwargs: Any) -> Engine:
        kwargs.setdefault("escalations", False)
        return Engine(config, clock=clock, sinks=False, listeners=[], receipt_keys=ReceiptKeys.ephemeral(), **kwargs)

    return make


def tool_call(name: str, args: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(args)}
    return {"id": call_id or f"call_{uuid.uuid4().hex[:8]}", "type": "function", "function": function}


def complete(messages: list[Any], *, run_id: str | None = "r1", text: str = "", calls: list[dict] | None = None) -> Any:
    """One model turn through LiteLLM's completion path, its reply scripted."""
    metadata = {} if run_id is None else {"run_id": run_id}
    reply = litellm.acompletion(model=MODEL, messages=messages, metadata=metadata, mock_response=text, mock_tool_calls=calls)
    return asyncio.run(reply)


def failing_turns(messages: list[Any], turns: int) -> None:
    """`turns` model turns asking for the same broken query, each answered by its error."""
    for _ in range(turns):
        response = complete(messages, calls=[tool_call("run_sql", SQL)])
        message = response.choices[0].message
        messages.append(message)  # as clients do: the response's message object itself
        for tc in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": f"Error: {CALL_ERROR}"})


# ----------------------------------------------------------------- both agents, LiteLLM's runtime
def test_the_runaway_agent_is_warned_at_its_fourth_call_cut_at_its_fifth_and_the_legitimate_one_runs_through(
    make_engine, use_guard
):
    use_guard(make_engine())  # in memory, and on Redis (the guard waits for it from a thread)
    asked, ran, answer = asyncio.run(example.run_agent(example.looping_model, {"run_sql": example.run_sql}, "count orders"))
    assert [i for i, cid in enumerate(asked, 1) if cid not in ran] == [5]
    assert json.loads(answer)["error"] == "IDENTICAL_FAILURE"  # what the client is left with instead of the call

    tools = {
        "lookup_customer": example.lookup_customer,
        "fetch_invoice": example.make_fetch_invoice(),
        "start_export": example.start_export,
        "get_job_status": example.make_get_job_status(),
    }
    asked, ran, answer = asyncio.run(example.run_agent(example.legit_model, tools, "invoice and export"))
    assert len(asked) == 6 and set(asked) == ran
    assert answer.startswith("Invoice INV-3001 is overdue")


def test_the_example_prints_its_summary_last(use_guard, capsys):
    use_guard(Engine(sinks=False, escalations=False, receipt_keys=ReceiptKeys.ephemeral()))  # main() replaces it
    asyncio.run(example.main())
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == {"framework": "litellm", "runaway_cut_at_call": 5, "legit_calls": 6, "legit_cut": 0}


# ----------------------------------------------------------------- after the model call
def test_a_warned_tool_call_is_kept_and_its_warning_put_in_the_content(memory_engine, use_guard):
    use_guard(memory_engine())
    messages: list[Any] = [{"role": "user", "content": "count orders"}]
    failing_turns(messages, 3)
    response = complete(messages, text="Let me try once more.", calls=[tool_call("run_sql", SQL, "c4")])
    message = response.choices[0].message
    assert [tc.id for tc in message.tool_calls] == ["c4"]
    intro, warning = message.content.split("\n\n")
    assert intro == "Let me try once more."
    assert (json.loads(warning)["warning"], json.loads(warning)["tool"]) == ("IDENTICAL_FAILURE", "run_sql")


def test_a_refused_tool_call_is_taken_out_of_the_response_and_its_observation_put_in_the_content(memory_engine, use_guard):
    use_guard(memory_engine())
    messages: list[Any] = [{"role": "user", "content": "count orders"}]
    failing_turns(messages, 4)  # the fourth ran under a warning
    response = complete(messages, text="Let me try again.", calls=[tool_call("run_sql", SQL)])
    message = response.choices[0].message
    assert message.tool_calls is None
    intro, refusal = message.content.split("\n\n")
    assert intro == "Let me try again."
    assert json.loads(refusal) | {"message": None, "actionable_instruction": None} == {
        "error": "IDENTICAL_FAILURE",
        "tool": "run_sql",
        "message": None,
        "actionable_instruction": None,
        "retry_after_s": None,
    }


def test_parallel_duplicate_transfers_in_one_answer_run_once(memory_engine, use_guard):
    use_guard(memory_engine())
    transfer = {"to": "ACC-2291", "amount": 500}
    calls = [tool_call("wire_transfer", transfer, f"t{i}") for i in range(3)]
    message = complete([{"role": "user", "content": "pay the rent"}], calls=calls).choices[0].message
    assert [tc.id for tc in message.tool_calls] == ["t0"]
    refusals = [json.loads(part) for part in message.content.split("\n\n")]
    assert [(r["error"], r["tool"]) for r in refusals] == [("DUPLICATE_MUTATION", "wire_transfer")] * 2


def test_only_the_refused_calls_of_a_turn_are_taken_out(memory_engine, use_guard):
    schema = {"type": "object", "required": ["email"], "properties": {"email": {"type": "string"}}}
    use_guard(memory_engine({"tools": {"lookup_customer": {"args_schema": schema}}}))
    calls = [tool_call("lookup_customer", {"name": "Ada"}, "bad"), tool_call("get_job_status", {"job_id": "J-1"}, "good")]
    response = complete([{"role": "user", "content": "hi"}], calls=calls)
    message = response.choices[0].message
    assert [tc.id for tc in message.tool_calls] == ["good"]
    refusal = json.loads(message.content)
    assert (refusal["error"], refusal["tool"]) == ("SCHEMA_VIOLATION", "lookup_customer")


def test_the_turns_spend_is_litellms_cost_counted_once(memory_engine, use_guard):
    engine = memory_engine()
    use_guard(engine)
    response = complete([{"role": "user", "content": "hi"}], calls=[tool_call("a_tool", {"x": 1}), tool_call("b_tool", {"y": 2})])
    cost = litellm.completion_cost(completion_response=response)
    assert cost > 0  # gpt-4o-mini is priced in LiteLLM's cost map
    spend = engine.store.peek_session("r1").spend
    assert (spend.steps, spend.tokens, spend.cost_usd) == (2, response.usage.total_tokens, pytest.approx(cost))
    # a turn without tool calls is counted as a turn
    complete([{"role": "user", "content": "hi"}], text="All done.")
    spend = engine.store.peek_session("r1").spend
    assert (spend.steps, spend.cost_usd) == (3, pytest.approx(2 * cost))


# ----------------------------------------------------------------- before the model call
def test_a_spent_budget_refuses_the_next_completion_with_429_and_the_reason(memory_engine, use_guard):
    engine = memory_engine({"budget": {"max_cost_usd": 0.00003}})  # a turn of gpt-4o-mini costs $0.0000135
    use_guard(engine)
    messages: list[Any] = [{"role": "user", "content": "count orders"}]
    complete(messages, calls=[tool_call("search", {"q": 1})])
    response = complete(messages, calls=[tool_call("search", {"q": 2})])
    assert json.loads(response.choices[0].message.content)["error"] == "COST_BUDGET"  # its call refused
    with pytest.raises(litellm.RateLimitError) as refused:
        complete(messages, calls=[tool_call("search", {"q": 3})])
    assert refused.value.status_code == 429
    assert "cost_budget" in str(refused.value) and "over the session budget of $0.00" in str(refused.value)
    assert engine.store.peek_session("r1").spend.steps == 2  # the refused call was never made, nor counted


def test_the_step_ceiling_refuses_the_call_that_would_pass_it_before_it_is_paid(memory_engine, use_guard):
    engine = memory_engine({"step_limit": {"max_steps": 2}})
    use_guard(engine)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    complete(messages, calls=[tool_call("search", {"q": 1})])
    complete(messages, calls=[tool_call("search", {"q": 2})])
    with pytest.raises(litellm.RateLimitError, match=r"\(step_limit\): step 3 is over the ceiling of 2 steps") as refused:
        complete(messages, calls=[tool_call("search", {"q": 3})])
    assert refused.value.status_code == 429
    assert engine.store.peek_session("r1").spend.steps == 2


def test_only_the_results_that_follow_the_models_last_message_are_recorded(memory_engine, use_guard, monkeypatch):
    engine = memory_engine()
    use_guard(engine)
    recorded: list[tuple[str, Any]] = []
    for method in ("record_tool_result", "record_user"):
        real = getattr(engine, method)
        # the dispatch hands the engine the typed event: kept as its trace-format fields
        monkeypatch.setattr(engine, method, lambda ev, real=real: recorded.append((ev.type, ev.model_dump())) or real(ev))
    messages: list[Any] = [{"role": "user", "content": "count orders"}]
    failing_turns(messages, 1)
    complete(messages, text="The query fails.")  # the request carries the call's result: recorded
    [(kind, result)] = recorded
    assert (kind, result["tool"], result["ok"], result["error"]) == ("tool_result", "run_sql", False, f"Error: {CALL_ERROR}")
    recorded.clear()
    messages += [{"role": "assistant", "content": "The query fails."}, {"role": "user", "content": "Use orders_2024."}]
    complete(messages, calls=[tool_call("run_sql", {"query": "SELECT count(*) FROM orders_2024"})])
    # the old result is not recorded again (it precedes the model's last message), and a user
    # message is no user turn: through LiteLLM the agent's own code writes it
    assert recorded == []


def test_a_user_message_does_not_lift_a_loop_halt(memory_engine, use_guard):
    # (as a user turn, news would lift it: the agent could free itself by writing one)
    engine = memory_engine()
    use_guard(engine)
    messages: list[Any] = [{"role": "user", "content": "count orders"}]
    failing_turns(messages, 4)
    response = complete(messages, calls=[tool_call("run_sql", SQL)])
    assert not response.choices[0].message.tool_calls  # the fifth identical failing call is refused
    messages += [
        {"role": "assistant", "content": response.choices[0].message.content},
        {"role": "user", "content": "The table is orders_2024: use it, with March's date filter."},
    ]
    with pytest.raises(litellm.RateLimitError) as refused:
        complete(messages, calls=[tool_call("run_sql", SQL)])
    assert refused.value.status_code == 429 and "identical_failure" in str(refused.value)


def test_a_guarded_runs_streamed_request_is_refused_its_tool_calls_could_not_be_checked(memory_engine, use_guard):
    use_guard(memory_engine())
    reply = litellm.acompletion(model=MODEL, messages=[{"role": "user", "content": "hi"}], metadata={"run_id": "r1"}, stream=True)
    with pytest.raises(litellm.BadRequestError, match="streamed answer"):
        asyncio.run(reply)


def failing_turns_of(messages: list[Any], turns: int, run_id) -> list[bool]:
    """Like failing_turns, each request under `run_id(turn)`; whether each turn's call was kept."""
    kept = []
    for turn in range(turns):
        try:
            response = complete(messages, run_id=run_id(turn), calls=[tool_call("run_sql", SQL)])
        except litellm.RateLimitError:  # the run is halted: the model call itself is refused
            return [*kept, False]
        message = response.choices[0].message
        kept.append(bool(message.tool_calls))
        messages.append(message)
        for tc in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": f"Error: {CALL_ERROR}"})
    return kept


@pytest.mark.parametrize("run_id", [lambda turn: None, lambda turn: f"fresh-{turn}-{uuid.uuid4().hex}"], ids=["none", "fresh"])
def test_a_runaway_without_a_steady_run_id_is_still_cut(memory_engine, use_guard, run_id):
    use_guard(memory_engine())
    messages = [{"role": "system", "content": "You are a SQL agent."}, {"role": "user", "content": "count the orders"}]
    kept = failing_turns_of(messages, 7, run_id)
    assert kept == [True] * 4 + [False, False], kept  # warned at the fourth call, cut at the fifth, then halted


def test_conversations_that_open_differently_are_sessions_of_their_own(memory_engine, use_guard):
    engine = memory_engine()
    use_guard(engine)
    for user in ("count the orders", "list the customers", "sum the invoices"):
        complete([{"role": "user", "content": user}], run_id=None, calls=[tool_call("run_sql", SQL)])
    assert engine.store.session_count() == 3


def test_a_run_id_that_cannot_key_a_session_is_a_bad_request(memory_engine, use_guard):
    use_guard(memory_engine())
    with pytest.raises(litellm.BadRequestError, match="session must be 1 to 256 printable characters"):
        complete([{"role": "user", "content": "hi"}], run_id="x" * 300)


def test_behind_the_proxy_its_own_hooks_decide_once_and_the_keys_team_is_the_tenant(memory_engine):
    """The proxy runs `async_pre_call_hook` / `async_post_call_success_hook` itself, then its
    router calls `acompletion`, whose deployment hooks must not decide a second time."""
    engine = memory_engine()
    guard = AgentBreakerGuardrail(engine, guardrail_name="agent-breaker", event_hook=["pre_call", "post_call"], default_on=True)
    meta = {"run_id": "p1", "tenant": "chosen-by-the-caller", "user_api_key_team_id": "team-7"}
    data = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "metadata": meta, "proxy_server_request": {}}
    response = litellm.ModelResponse(model=MODEL, choices=[{"message": {"role": "assistant", "content": ""}}])
    response.choices[0].message.tool_calls = [litellm.ChatCompletionMessageToolCall(**tool_call("search", {"q": 1}, "c1"))]
    response._hidden_params["response_cost"] = 0.25  # the cost the proxy logged, at the deployment's own price

    async def proxy() -> None:
        acompletion = litellm.types.utils.CallTypes.acompletion
        await guard.async_pre_call_deployment_hook(dict(data), acompletion)
        assert await guard.async_post_call_success_deployment_hook(dict(data), response, acompletion) is None
        key = UserAPIKeyAuth(token="hash-1", team_id="team-7-auth")
        await guard.async_pre_call_hook(key, None, dict(data), "acompletion")
        assert await guard.async_post_call_success_hook(dict(data), key, response) is response

    asyncio.run(proxy())
    assert engine.store.peek_session("p1") is None  # the caller picks no tenant behind the proxy
    assert engine.store.peek_session("team-7\x1fp1") is None  # nor the key's team by metadata
    spend = engine.store.peek_session("team-7-auth\x1fp1").spend
    assert (spend.steps, spend.cost_usd) == (1, 0.25)


def test_behind_the_proxy_keys_without_a_team_do_not_share_runs(memory_engine):
    engine = memory_engine()
    guard = AgentBreakerGuardrail(engine, guardrail_name="agent-breaker", event_hook=["pre_call", "post_call"], default_on=True)
    response = litellm.ModelResponse(model=MODEL, choices=[{"message": {"role": "assistant", "content": ""}}])
    response.choices[0].message.tool_calls = [litellm.ChatCompletionMessageToolCall(**tool_call("search", {"q": 1}, "c1"))]

    async def request(key: Any) -> None:
        data = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "metadata": {"run_id": "p1"}}
        data["proxy_server_request"] = {}
        await guard.async_pre_call_hook(key, None, data, "acompletion")
        await guard.async_post_call_success_hook(data, key, response)

    asyncio.run(request(UserAPIKeyAuth(token="hash-a")))
    asyncio.run(request(UserAPIKeyAuth(token="hash-b")))
    assert engine.store.peek_session("key-hash-a\x1fp1").spend.steps == 1
    assert engine.store.peek_session("key-hash-b\x1fp1").spend.steps == 1


def test_the_proxy_builds_the_guard_from_its_config(tmp_path, monkeypatch):
    registry = pytest.importorskip("litellm.proxy.guardrails.guardrail_registry", exc_type=ImportError)  # the proxy's deps
    (tmp_path / "agent_breaker.yaml").write_text("step_limit:\n  max_steps: 7\nreceipts:\n  dev_ephemeral_key: true\n")
    monkeypatch.chdir(tmp_path)
    saved = list(litellm.callbacks)
    guardrail = {
        "guardrail_name": "agent-breaker",
        "litellm_params": {
            "guardrail": "agent_breaker.integrations.litellm.AgentBreakerGuardrail",
            "mode": ["pre_call", "post_call"],
            "default_on": True,
            "config_path": "agent_breaker.yaml",
        },
    }
    try:
        handler = registry.InMemoryGuardrailHandler()
        handler.initialize_guardrail(guardrail, config_file_path=str(tmp_path / "config.yaml"))
        [guard] = [c for c in litellm.callbacks if isinstance(c, AgentBreakerGuardrail)]
    finally:
        litellm.callbacks = saved
    assert (guard.guardrail_name, guard.event_hook, guard.default_on) == ("agent-breaker", ["pre_call", "post_call"], True)
    assert guard.engine.config.step_limit.max_steps == 7


# ----------------------------------------------------------------- Engine.check_model_call
def test_check_model_call_allows_a_session_with_room_and_writes_nothing(make_engine, clock):
    engine = make_engine()
    assert engine.check_model_call({"session": "new"}).allowed
    assert engine.store.peek_session("new") is None
    run(engine, clock, "search", {"q": 1}, True, {"hits": 3}, input_tokens=100)
    before = engine.store.peek_session("s1").spend
    assert engine.check_model_call({"session": "s1"}).allowed
    assert engine.store.peek_session("s1").spend == before


def test_check_model_call_refuses_the_call_whose_step_would_pass_the_ceiling(make_engine, clock, incidents):
    engine = make_engine({"step_limit": {"max_steps": 2}})
    for i in range(2):
        run(engine, clock, "search", {"q": i}, True, {"hits": i})
    v = engine.check_model_call({"session": "s1"})
    assert (v.allowed, v.heuristic, v.scope, v.counters) == (False, "step_limit", "session", {"steps": 3, "max_steps": 2})
    assert v.observation["error"] == "STEP_LIMIT"
    # nothing was counted, written or reported
    assert incidents == [] and engine.store.peek_session("s1").spend.steps == 2
    assert engine.store.peek_session("s1").halted is None


def test_check_model_call_refuses_a_halted_session(make_engine, clock):
    engine = make_engine({"budget": {"max_tokens": 1000}}, escalations=False)
    run(engine, clock, "search", {"q": 1}, True, {"hits": 1}, input_tokens=400)
    assert not engine.check_tool_call(call("search", {"q": 2}, input_tokens=400)).allowed  # 800 + 400 projected
    v = engine.check_model_call({"session": "s1"})
    assert (v.allowed, v.heuristic) == (False, "token_budget")
    assert v.reason.startswith("session halted earlier: projected spend")


def test_check_model_call_refuses_while_the_session_spends_too_fast(make_engine, clock):
    engine = make_engine({"token_velocity": {"max_tokens_per_s": 100, "window_s": 10}})
    assert not engine.check_tool_call(call("search", {"q": 1}, input_tokens=5000)).allowed
    v = engine.check_model_call({"session": "s1"})
    assert (v.allowed, v.heuristic, v.observation["retry_after_s"]) == (False, "token_velocity", 10)
    clock.advance(11)
    assert engine.check_model_call({"session": "s1"}).allowed


def test_check_model_call_waits_for_the_human_a_frozen_session_went_to(make_engine, clock, tmp_path):
    queue = SqliteEscalations(tmp_path / "escalations.db")
    engine = make_engine(escalations=queue)
    for _ in range(4):  # three failures, then one more under a warning
        run(engine, clock, "run_sql", SQL, False, None, error=CALL_ERROR)
    escalation_id = engine.check_tool_call(call("run_sql", SQL)).route["escalation_id"]
    v = engine.check_model_call({"session": "s1"})
    assert (v.allowed, v.route) == (False, {"tier": "escalate", "escalation_id": escalation_id})
    queue.resolve(escalation_id, "resume", "fixed the query")
    assert engine.check_model_call({"session": "s1"}).allowed
    queue.close()


def test_check_model_call_decides_nothing_when_the_guard_is_off(make_engine, clock):
    engine = make_engine({"mode": "off"})
    assert engine.check_model_call({"session": "s1"}).allowed
