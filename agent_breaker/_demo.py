"""`agent-breaker demo`: scripted agents, offline, through the real NeMo Guardrails runtime.

Four agents run as recorded scripts (no model, no network, no key): one loops on a failing
tool, one fabricates a bank transfer, one does a legitimate multi-step task, one legitimately
polls a job until it finishes. Every event goes through the shipped `agent_breaker` config's
Colang 2.x flows (one live Colang state per agent, as the events endpoint keeps), and the
replay bookkeeping turns the verdict events into a table: where and why each agent was cut,
and the model spend with and without the breaker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._extras import no_nemo_usage_stats
from ._replay import Replayer
from .clock import FakeClock

if TYPE_CHECKING:
    from .engine import Engine

_PRICE = 0.000003  # $ per token, for the scripted spend


def _call(s: str, ts: float, i: int, tool: str, args: dict[str, Any], tokens: int, **kw: Any) -> dict[str, Any]:
    return {
        "session": s,
        "ts": ts,
        "type": "tool_call",
        "tool": tool,
        "args": args,
        "call_id": f"c{i}",
        "input_tokens": tokens,
        "output_tokens": 150,
        "cost_usd": round((tokens + 150) * _PRICE, 6),
        **kw,
    }


def _result(s: str, ts: float, i: int, tool: str, ok: bool, result: Any = None, error: str | None = None) -> dict[str, Any]:
    ev = {"session": s, "ts": ts, "type": "tool_result", "tool": tool, "call_id": f"c{i}", "ok": ok, "result": result}
    if error:
        ev["error"] = error
    return ev


def looping_agent() -> Iterator[dict[str, Any]]:
    s = "looping-agent"
    yield _call(s, 0, 0, "search_docs", {"q": "quarterly revenue"}, 1800)
    yield _result(s, 1, 0, "search_docs", True, {"hits": 3})
    for i in range(1, 41):
        t = 3.0 * i
        yield _call(
            s,
            t,
            i,
            "query_warehouse",
            {"sql": "SELECT SUM(amount) FROM revenue_q3"},
            2000 + 60 * i,
            thought="The query failed. Let me run it again.",
        )
        yield _result(s, t + 1, i, "query_warehouse", False, error="HTTP 500 Internal Server Error")
    yield {"session": s, "ts": 200, "type": "final", "text": "I could not get the revenue numbers."}


def fabricating_agent() -> Iterator[dict[str, Any]]:
    s = "fabricating-agent"
    yield _call(s, 0, 0, "get_account", {"account": "A"}, 1500)
    yield _result(s, 1, 0, "get_account", True, {"balance": 12000})
    yield _call(s, 3, 1, "wire_transfer", {"from": "A", "to": "B", "amount": 5000}, 1700, mutating=True)
    yield _result(s, 4, 1, "wire_transfer", False, error="HTTP 502 Bad Gateway")
    yield {"session": s, "ts": 6, "type": "final", "text": "I have transferred $5,000 from A to B. Reference: TX-99482."}


def working_agent() -> Iterator[dict[str, Any]]:
    s = "working-agent"
    steps: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("list_tickets", {"queue": "billing"}, {"tickets": ["T-101", "T-102", "T-103"]}),
        ("read_ticket", {"id": "T-101"}, {"summary": "double charge"}),
        ("read_ticket", {"id": "T-102"}, {"summary": "refund request"}),
        ("read_ticket", {"id": "T-103"}, {"summary": "address change"}),
        ("refund_payment", {"ticket": "T-101", "amount": 42}, {"refund_id": "RF-20931", "status": "settled"}),
        ("update_ticket", {"id": "T-101", "status": "resolved"}, {"id": "T-101", "status": "resolved"}),
    ]
    for i, (tool, args, result) in enumerate(steps):
        yield _call(s, 4.0 * i, i, tool, args, 2200)
        yield _result(s, 4.0 * i + 1, i, tool, True, result)
    yield {"session": s, "ts": 40, "type": "final", "text": "Refunded the double charge on T-101 (RF-20931) and resolved it."}


def polling_agent() -> Iterator[dict[str, Any]]:
    s = "polling-agent"
    yield _call(s, 0, 0, "start_build", {"ref": "main"}, 1600)
    yield _result(s, 1, 0, "start_build", True, {"job_id": "ci-7"})
    for i in range(1, 21):
        t = 30.0 * i
        state = "running" if i < 20 else "success"
        yield _call(s, t, i, "check_job_status", {"job_id": "ci-7"}, 1200, thought="Waiting for CI to finish.")
        yield _result(s, t + 1, i, "check_job_status", True, {"state": state, "progress": round(i / 20, 2)})
    yield {"session": s, "ts": 700, "type": "final", "text": "The build of main passed."}


AGENTS = (
    (looping_agent, "runaway"),
    (fabricating_agent, "runaway"),
    (working_agent, "legit"),
    (polling_agent, "legit"),
)


@dataclass(frozen=True)
class _Decision:
    allowed: bool
    heuristic: str | None
    advisory: bool = False


#: the demo's tools with fallback tiers (tools.<name>.fallback), added to the shipped config
FALLBACK_TOOLS: dict[str, Any] = {
    "enrich_lead": {"fallback": {"alternatives": [{"tool": "enrich_lead_v1", "args": {"domain": "company.domain"}}]}},
    "score_lead": {"fallback": {"static": "Lead scoring is down; proceed without a score."}},
    "sync_crm": {"fallback": {"escalate": True}},
}


class NemoRuntime:
    """The engine interface the replay bookkeeping uses, answered by the Colang flows of a
    NeMo config (`sessions.GuardSessions`: one live state per session, one event per step)."""

    def __init__(self, config_name: str = "agent_breaker", custom: dict[str, Any] | None = None) -> None:
        from nemoguardrails import LLMRails, RailsConfig

        from .configs import config_path
        from .dispatch import ENGINE_PARAM
        from .sessions import GuardSessions

        config = RailsConfig.from_path(str(config_path(config_name)))
        if custom:  # settings merged over the shipped config's agent_breaker block
            block = config.custom_data.setdefault("agent_breaker", {})
            block.update(custom)
        rails = LLMRails(config)
        self.engine: Engine = rails.runtime.registered_action_params[ENGINE_PARAM]
        # a live engine decides on its own clock, not the caller's `ts`: the scripted agents'
        # time is theirs, so the demo moves the engine's clock to each event's time (from now:
        # escalations the demo writes carry today's date)
        self.started = time.time()
        self.clock = FakeClock(self.started)
        self.engine.clock = self.clock
        self.guards = GuardSessions(rails)
        self._loop = asyncio.new_event_loop()

    def _send(self, event: Any) -> dict[str, Any]:
        from .protocol import to_colang_event

        data = event.model_dump(exclude_none=True)
        self.clock.set(self.started + data["ts"])
        return self._loop.run_until_complete(self.guards.send(to_colang_event(data)))

    def process(self, ev: Any) -> _Decision:
        v = self._send(ev)
        return _Decision(bool(v.get("allowed", v.get("accepted"))), v["heuristic"], bool(v.get("advisory")))

    def step_cost_usd(self, ev: Any) -> float:
        return self.engine.step_cost_usd(ev)

    def send(self, event: dict[str, Any]) -> dict[str, Any]:
        """One trace-format event (a dict) through the flows; its verdict event."""
        from .events import parse_event

        return self._send(parse_event(event))

    def close(self) -> None:
        self._loop.close()


def run_demo(listener: Callable[[Any], None] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run every scripted agent: one row per agent, then one per agent after a trip (rerouted,
    given the static answer, escalated). `listener` also receives the incidents."""
    # receipts need a signing key; the demo's never leave this process, so a random one will
    # do (set only while the config is built: the caller's environment is left as it was)
    no_nemo_usage_stats()
    with _environ_default(AGENT_BREAKER_RECEIPT_KEYS="demo:" + secrets.token_hex(32)):
        runtime = NemoRuntime(custom={"tools": FALLBACK_TOOLS})
    if listener is not None:
        runtime.engine.listeners.append(listener)
    rows = []
    try:
        for agent, kind in AGENTS:
            events = list(agent())
            replayer = Replayer(runtime, decide=runtime.process)  # type: ignore[arg-type]
            for n, ev in enumerate(events, 1):
                replayer.apply(ev, n)
            [out] = list(replayer.results())
            calls = [e for e in events if e["type"] == "tool_call"]
            out["kind"] = kind
            out["steps"] = len(calls)
            out["cost_without_usd"] = round(sum(e["cost_usd"] for e in calls), 6)
            # what the model spent until the guard stopped it: the refused step's tokens were
            # spent too (the incident's cost_usd_so_far counts the same)
            trip = out["trip_event"]
            out["cost_with_usd"] = round(
                sum(e["cost_usd"] for i, e in enumerate(events, 1) if e["type"] == "tool_call" and (trip is None or i <= trip)), 6
            )
            out["cut_at"] = _describe(events, out["trip_event"])
            rows.append(out)
        after = after_a_trip(runtime)
    finally:
        runtime.close()
    return rows, after


def after_a_trip(runtime: NemoRuntime) -> list[dict[str, Any]]:
    """Three CRM tools go down for the whole fleet (five sessions see HTTP 503 from each, which
    opens their shared breakers); then three agents call one each, and act on the route their
    refusal carries, as a gateway or an agent framework would."""
    t = 1000.0
    for worker in range(5):
        for tool in FALLBACK_TOOLS:
            t += 1.0
            s = f"fleet-worker-{worker}"
            runtime.send({"session": s, "ts": t, "type": "tool_call", "tool": tool, "args": {"n": worker}, "call_id": tool})
            runtime.send(
                {
                    "session": s,
                    "ts": t + 0.5,
                    "type": "tool_result",
                    "tool": tool,
                    "call_id": tool,
                    "ok": False,
                    "error": "HTTP 503 Service Unavailable",
                }
            )
    rows = []
    for session, tool in (("rerouted-agent", "enrich_lead"), ("static-agent", "score_lead"), ("escalated-agent", "sync_crm")):
        t += 10.0
        args = {"company": {"domain": "acme.example", "name": "Acme"}}
        v = runtime.send({"session": session, "ts": t, "type": "tool_call", "tool": tool, "args": args, "call_id": "c1"})
        route = v.get("route") or {}
        row = {"session": session, "tool": tool, "heuristic": v["heuristic"], "route": route.get("tier")}
        if route.get("tier") == "alternative":
            # the caller runs the alternative: an ordinary guarded call, with the mapped arguments
            alt = runtime.send(
                {
                    "session": session,
                    "ts": t + 1,
                    "type": "tool_call",
                    "tool": route["tool"],
                    "args": route["args"],
                    "call_id": "c2",
                }
            )
            runtime.send(
                {
                    "session": session,
                    "ts": t + 2,
                    "type": "tool_result",
                    "tool": route["tool"],
                    "call_id": "c2",
                    "ok": True,
                    "result": {"employees": 120},
                }
            )
            row["then"] = f"ran {route['tool']}{route['args']}: {'allowed' if alt['allowed'] else 'refused'}"
        elif route.get("tier") == "static":
            row["then"] = f"used the answer: {route['answer']}"
        elif route.get("tier") == "escalate":
            after = runtime.send(
                {"session": session, "ts": t + 5, "type": "tool_call", "tool": "send_email", "args": {}, "call_id": "c2"}
            )
            state = "refused" if not after["allowed"] else "allowed"
            row["then"] = f"handed to a human ({route['escalation_id']}); its next call is {state}"
            row["escalation_id"] = route["escalation_id"]
        else:
            row["then"] = "refused, no fallback taken"
        rows.append(row)
    return rows


@contextlib.contextmanager
def _environ_default(**values: str) -> Iterator[None]:
    """Set the variables that are not set, for the duration of the block."""
    added = [name for name in values if name not in os.environ]
    os.environ.update({name: values[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _describe(events: list[dict[str, Any]], index: int | None) -> str:
    if index is None:
        return "-"
    ev = events[index - 1]
    what = ev.get("tool") or ev["type"]
    return f"event {index} ({what})"


def _usd(value: float) -> str:
    return f"${value:.4f}"


def format_after(rows: list[dict[str, Any]], db: str) -> str:
    """The agents after a trip: the route each refusal took, and what the agent did next."""
    lines = ["", "after a trip: enrich_lead, score_lead and sync_crm are down for the whole fleet", ""]
    lines += [f"{r['session']:16} {r['tool']:12} -> {r['route'] or '-':12} {r['then']}" for r in rows]
    if any("escalation_id" in r for r in rows):
        lines += ["", f"list the escalations with: agent-breaker escalations list --db {_shell_path(db)}"]
    return "\n".join(lines)


def _shell_path(path: str) -> str:
    """A path to paste into a shell: quoted, and under the home folder as `~/...`."""
    home = str(Path.home())
    if path.startswith(home + os.sep):
        return "~/" + shlex.quote(path[len(home) + 1 :])
    return shlex.quote(path)


def format_table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'agent':18} {'kind':7} {'steps':>5} {'run':>4} {'cut':>4}  {'where':26} {'why':18} {'spend with':>11} {'without':>9}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['session']:18} {r['kind']:7} {r['steps']:>5} {r['allowed_calls']:>4} {r['blocked_calls']:>4}  {r['cut_at']:26} "
            f"{(r['heuristic'] or 'not cut'):18} {_usd(r['cost_with_usd']):>11} {_usd(r['cost_without_usd']):>9}"
        )
    saved = sum(r["cost_without_usd"] - r["cost_with_usd"] for r in rows)
    lines.append("")
    cut_legit = sum(1 for r in rows if r["kind"] == "legit" and r["tripped"])
    lines.append(f"spend refused by the breaker: ${saved:.4f}; legitimate agents cut: {cut_legit}")
    return "\n".join(lines)
