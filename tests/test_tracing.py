"""OpenTelemetry: a span per decision with the heuristic, verdict and counters, incidents and
breaker transitions as span events, no payload text anywhere; and the real server exporting
over OTLP/HTTP to a local receiver named by the standard environment variables."""

from __future__ import annotations

import uuid

import pytest
from conftest import CALL_ERROR, OUTAGE, call, run

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SECRET = "SECRET-PAYLOAD-93ac1f"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def test_each_decision_is_a_span_with_its_verdict_and_counters(make_engine, clock, spans):
    tracer, exporter = spans
    engine = make_engine(tracer=tracer)
    for _ in range(4):  # the fourth call is warned of, and runs
        run(engine, clock, "run_sql", {"q": SECRET}, False, {"e": SECRET}, error=CALL_ERROR, thought=SECRET)
    assert not engine.check_tool_call(call("run_sql", {"q": SECRET}, thought=SECRET)).allowed
    finished = exporter.get_finished_spans()
    assert [s.name for s in finished] == ["agent_breaker.tool_call", "agent_breaker.tool_result"] * 4 + [
        "agent_breaker.tool_call"
    ]
    warned = finished[6]
    assert warned.attributes["agent_breaker.verdict"] == "warned"
    assert warned.attributes["agent_breaker.heuristic"] == "identical_failure"
    [warning] = warned.events
    assert (
        warning.name,
        warning.attributes["agent_breaker.severity"],
        warning.attributes["agent_breaker.advisory"],
    ) == ("agent_breaker.trip", "warn", True)
    last = finished[-1]
    assert last.attributes["agent_breaker.event"] == "tool_call"
    assert last.attributes["agent_breaker.verdict"] == "blocked"
    assert last.attributes["agent_breaker.heuristic"] == "identical_failure"
    assert last.attributes["agent_breaker.counters.failures"] == 4
    [event] = last.events
    assert event.name == "agent_breaker.trip"
    assert (
        event.attributes["agent_breaker.heuristic"],
        event.attributes["agent_breaker.severity"],
        event.attributes["agent_breaker.advisory"],
    ) == ("identical_failure", "block", False)
    assert (
        finished[0].attributes["agent_breaker.verdict"] == "allowed" and "agent_breaker.heuristic" not in finished[0].attributes
    )
    dumped = repr([(s.name, dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events]) for s in finished])
    assert SECRET not in dumped


def test_a_breaker_opening_is_an_event_of_the_decision_that_opened_it(make_engine, clock, spans):
    tracer, exporter = spans
    engine = make_engine(tracer=tracer)
    for i in range(5):
        run(engine, clock, "fetch", {"n": i}, False, None, error=OUTAGE, session=f"s{i}")
    opening = [s for s in exporter.get_finished_spans() if s.events]
    assert [(s.name, [e.name for e in s.events]) for s in opening] == [("agent_breaker.tool_result", ["agent_breaker.breaker"])]
    attrs = opening[0].events[0].attributes
    assert (attrs["agent_breaker.event"], attrs["agent_breaker.from"], attrs["agent_breaker.to"]) == (
        "breaker_opened",
        "closed",
        "open",
    )


def test_an_invalid_event_is_a_blocked_span_without_its_text(make_engine, spans):
    from agent_breaker import InvalidEventError

    tracer, exporter = spans
    engine = make_engine(tracer=tracer)
    with pytest.raises(InvalidEventError):
        engine.check_tool_call({"session": "s", "tool": "t", "args": SECRET})
    [span] = exporter.get_finished_spans()
    assert span.attributes["agent_breaker.heuristic"] == "invalid_event"
    assert not span.events and SECRET not in repr(dict(span.attributes))


def test_no_provider_means_no_tracing(make_engine):
    assert make_engine().tracer is None  # the API alone drops every span: not worth the microseconds


pytest.importorskip("nemoguardrails")


def test_the_server_exports_spans_over_otlp_to_the_standard_endpoint():
    from _receiver import receiving
    from _server import call as scall
    from _server import result as sresult
    from _server import start
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    with receiving() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "guard-under-test",
        }
        srv = start(env)
        try:
            s = f"t-{uuid.uuid4().hex[:8]}"
            for i in range(4):  # the fourth call is warned of, and runs
                srv.verdicts(s, scall(i, args={"q": SECRET}), sresult(i, error=CALL_ERROR, payload={"e": SECRET}))
            assert not srv.verdicts(s, scall(4, args={"q": SECRET}))[0]["allowed"]

            def names() -> list[str]:
                out = []
                for path, body in receiver.requests:
                    assert path == "/v1/traces"
                    req = ExportTraceServiceRequest.FromString(body)
                    out += [span.name for rs in req.resource_spans for ss in rs.scope_spans for span in ss.spans]
                return out

            assert receiver.wait_for(lambda: names().count("agent_breaker.tool_call") >= 5)
        finally:
            srv.stop()
    assert b"guard-under-test" in receiver.raw()
    assert SECRET.encode() not in receiver.raw()


def test_an_operator_move_is_a_span_with_its_breaker_event(make_engine, spans):
    tracer, exporter = spans
    engine = make_engine(tracer=tracer)
    engine.operator.force_breaker("fetch", "forced_open")
    [span] = exporter.get_finished_spans()
    assert span.name == "agent_breaker.breaker_force"
    assert [(e.name, e.attributes["agent_breaker.event"]) for e in span.events] == [("agent_breaker.breaker", "breaker_forced")]


def test_a_decision_span_is_a_child_of_the_callers_span(make_engine, clock, spans):
    tracer, exporter = spans
    engine = make_engine(tracer=tracer)
    with tracer.start_as_current_span("gateway request"):
        engine.check_tool_call(call("search", {"q": 1}))
    decision, request = exporter.get_finished_spans()
    assert decision.parent is not None and decision.parent.span_id == request.context.span_id
