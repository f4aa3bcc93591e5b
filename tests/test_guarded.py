"""Enforcement in front of the tool (issue 13, item 1): `guarded` checks each call, runs the tool
only when it is allowed, records its result or exception, and hands back the synthetic
observation when it is refused; sync and async, decorator form, routes to registered
alternatives. On both stores."""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass
from typing import Any

import pytest

from agent_breaker import BreakerStateName, guarded

run_id: contextvars.ContextVar[str] = contextvars.ContextVar("run_id", default="run-1")


def test_a_tool_runs_while_allowed_and_a_looping_call_gets_the_observation_not_the_tool(make_engine):
    engine = make_engine()
    ran: list[str] = []

    @guarded(engine=engine, session=run_id.get)
    def run_sql(query: str) -> dict:
        ran.append(query)
        raise ValueError("syntax error at or near SELEC")

    for _ in range(4):  # the fourth runs under a warning (logged: no agent reads a plain function's answer)
        with pytest.raises(ValueError):
            run_sql("SELEC 1")
    out = run_sql("SELEC 1")
    assert ran == ["SELEC 1"] * 4  # the fifth call never reached the tool
    assert (out["error"], out["tool"]) == ("IDENTICAL_FAILURE", "run_sql")
    assert "failed 4 times with the same arguments" in out["message"] and out["actionable_instruction"]
    assert run_sql.__name__ == "run_sql"
    # another run (session) is not affected
    token = run_id.set("run-2")
    try:
        with pytest.raises(ValueError):
            run_sql("SELEC 1")
    finally:
        run_id.reset(token)


def test_a_call_under_a_warning_runs_and_its_advisory_goes_to_the_callers_hook(make_engine):
    advice: list[dict] = []

    @guarded(engine=make_engine(), session="s1", advise=advice.append)
    def run_sql(query: str) -> str:
        raise ValueError("syntax error")

    for _ in range(4):
        with pytest.raises(ValueError):
            run_sql("SELEC 1")
    assert [(a["warning"], a["tool"]) for a in advice] == [("IDENTICAL_FAILURE", "run_sql")]


def test_a_failing_advise_hook_does_not_keep_the_warned_call_from_running(make_engine, caplog):
    ran: list[str] = []

    def broken_hook(_: dict) -> None:
        raise RuntimeError("hook down")

    @guarded(engine=make_engine(), session="s1", advise=broken_hook)
    def run_sql(query: str) -> str:
        ran.append(query)
        raise ValueError("syntax error")

    for _ in range(4):
        with pytest.raises(ValueError):
            run_sql("SELEC 1")
    assert len(ran) == 4 and "advise hook of run_sql failed" in caplog.text


def test_parallel_calls_of_one_model_step_repeat_no_action(make_engine):
    sent: list[int] = []

    @guarded(engine=make_engine(), session="s1", mutating=True, turn="step-1")
    def wire_transfer(to: str, amount: int) -> str:
        sent.append(amount)
        return "sent"

    outs = [wire_transfer("ACC-1", 500) for _ in range(3)]  # the step's calls, run one after another
    assert sent == [500] and outs[0] == "sent"
    assert [o["error"] for o in outs[1:]] == ["DUPLICATE_MUTATION", "DUPLICATE_MUTATION"]


def test_results_are_recorded_so_progress_is_seen(make_engine):
    engine = make_engine()
    status = iter(["queued", "running", "running", "done"])

    def check_job(job_id: str) -> dict:
        return {"state": next(status)}

    poll = guarded(check_job, engine=engine, session="s1")
    assert [poll("j1")["state"] for _ in range(4)] == ["queued", "running", "running", "done"]


def test_transport_errors_are_the_dependencys_and_open_its_breaker_for_every_session(make_engine):
    engine = make_engine({"breaker": {"open_s": 60.0}})

    def fetch(url: str) -> str:
        raise ConnectionError("connection refused")

    for i in range(5):
        with pytest.raises(ConnectionError):
            guarded(fetch, engine=engine, session=f"s{i}")(f"https://x/{i}")
    assert engine.operator.breaker_state("fetch@x") is BreakerStateName.OPEN  # the breaker of the host that failed
    out = guarded(fetch, engine=engine, session="s9")("https://x/9")
    assert out["error"] == "CIRCUIT_OPEN" and out["retry_after_s"] > 0


def test_a_refusal_that_routes_to_a_registered_alternative_runs_it_guarded(make_engine):
    engine = make_engine(
        {"tools": {"enrich": {"fallback": {"alternatives": [{"tool": "enrich_v1", "args": {"domain": "company"}}]}}}}
    )
    engine.operator.force_breaker("enrich", "forced_open")
    calls: list[str] = []

    def enrich_v1(domain: str) -> dict:
        calls.append(domain)
        return {"employees": 120}

    @guarded(engine=engine, session="s1", alternatives={"enrich_v1": guarded(enrich_v1, engine=engine, session="s1")})
    def enrich(company: str) -> dict:
        raise AssertionError("the primary is forced open: it must not run")

    assert enrich("acme.example") == {"employees": 120}
    assert calls == ["acme.example"]


def test_an_async_tool_is_guarded_the_same_way(make_engine):
    engine = make_engine()
    ran = 0

    @guarded(engine=engine, session="s1")
    async def search(q: str, *, limit: int = 10) -> list:
        nonlocal ran
        ran += 1
        return []

    async def agent() -> list:
        return [await search("same", limit=5) for _ in range(8)]

    outs = asyncio.run(agent())
    assert outs[0] == [] and isinstance(outs[-1], dict) and outs[-1]["error"] == "IDENTICAL_CALL"
    assert ran < 8


def test_outputs_that_are_not_json_are_recorded_as_their_fields_or_text(make_engine):
    engine = make_engine()

    @dataclass
    class Lead:
        id: str

    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    assert guarded(lambda: Lead("L1"), engine=engine, session="s1", tool="lead")() == Lead("L1")
    assert str(guarded(lambda: Opaque(), engine=engine, session="s1", tool="opaque")()) == "opaque"
    # both results were recorded: no call of the session still waits for its result
    assert not engine.store.peek_session("s1").loops.pending


def test_a_call_cancelled_by_a_timeout_is_recorded_as_the_dependencys_failure(make_engine):
    engine = make_engine()
    never = asyncio.Event()
    started: list[str] = []

    @guarded(engine=engine, session="s1")
    async def fetch_rates(day: str) -> dict:
        started.append(day)
        await never.wait()  # the dependency never answers
        return {}

    async def cancelled_call() -> Any:
        started.clear()
        task = asyncio.ensure_future(fetch_rates("2026-11-30"))
        while not started:  # the call was allowed and the tool runs
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert engine.awaiting_results("s1") == {}  # recorded, not left waiting for ever
        return None

    async def main() -> Any:
        for _ in range(5):
            await cancelled_call()
        return await fetch_rates("2026-11-30")

    out = asyncio.run(main())
    # five timeouts in a row: the session's own breaker is open and refuses the sixth call (its
    # identical_failure would only warn it first); the tenant's shared breaker waits for a second
    # session failing before it shuts the tool for everyone
    assert out["error"] == "CIRCUIT_OPEN" and out["tool"] == "fetch_rates"
    assert engine.operator.breaker_state("fetch_rates") is BreakerStateName.CLOSED
