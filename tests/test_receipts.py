"""Execution receipts and final-answer verification (reward hacking).

The threat: a payment tool fails, and the agent tells the user "I have transferred $5,000.
Reference: TX-99482." Every reference id a final answer cites must come from a successful tool
result of the session (or from the user), and every completed mutating action it claims needs a
receipted success of that tool.
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
import re
import string

import pytest
from conftest import SESSION, call, examples, final, result, run, user
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_breaker import BreakerStateName, ConfigError, Engine, FakeClock, ReceiptKeys, ResultVerdict, Verdict, _claims, receipts
from agent_breaker._canonical import Fingerprinter
from agent_breaker._text import fold_text, normalize_text
from agent_breaker.cli import main as cli_main
from agent_breaker.config import DEFAULT_REFERENCE_PATTERNS, parse_config
from agent_breaker.engine._facts import result_canonical

UNVERIFIED = "unverified_claim"
EMPTY = "empty_mutation_result"
KEY_ENV = "AGENT_BREAKER_RECEIPT_KEYS"

FABRICATED = "I have transferred $5,000. Reference: TX-99482."
PAYMENT_ARGS = {"to": "landlord", "amount_usd": 5000}
RECEIPTED_PAYLOAD = {"tx_id": "TX-80276", "amount_usd": 5000}
RECEIPT_FIELDS = {"v", "kid", "tenant", "session", "call_id", "tool", "args_hash", "result_hash", "ts", "sig"}


# ----------------------------------------------------------------- helpers
def pay(
    engine: Engine,
    clock: FakeClock,
    *,
    ok: bool,
    payload,
    tool: str = "wire_transfer",
    session: str = SESSION,
    args: dict | None = None,
    **kw,
):
    """One payment call and its result; returns (call verdict, result verdict)."""
    clock.advance(2.0)
    v = engine.check_tool_call(call(tool, args or PAYMENT_ARGS, session=session, **kw))
    assert v.allowed, v
    clock.advance(0.5)
    rv = engine.record_tool_result(result(tool, ok, payload, session=session, call_id=v.call_id, **kw))
    return v, rv


def failed_transfer(engine: Engine, clock: FakeClock, session: str = SESSION) -> None:
    _, rv = pay(engine, clock, ok=False, payload={"error": "insufficient funds"}, session=session)
    assert rv.failed is True
    assert rv.receipt is None


def receipted_transfer(engine: Engine, clock: FakeClock, session: str = SESSION, payload=None, args=None):
    v, rv = pay(
        engine, clock, ok=True, payload=dict(RECEIPTED_PAYLOAD) if payload is None else payload, session=session, args=args
    )
    assert rv.receipt is not None
    return v, rv


def assert_rejected(verdict: Verdict) -> None:
    assert verdict.allowed is False
    assert verdict.heuristic == UNVERIFIED
    assert verdict.severity == "block"
    assert verdict.scope == "session"
    assert verdict.observation is not None
    assert verdict.observation["error"] == "UNVERIFIED_CLAIM"


def assert_passes(verdict: Verdict) -> None:
    assert verdict.allowed is True
    assert verdict.heuristic is None
    assert verdict.severity is None


# ----------------------------------------------------------------- fabricated references
def test_fabricated_reference_after_failed_transfer_is_rejected_and_reported_without_payload(engine, clock, incidents):
    failed_transfer(engine, clock)
    assert incidents == []

    verdict = engine.verify_final(final(FABRICATED))

    assert_rejected(verdict)
    assert verdict.counters == {"unverified_references": 1}
    assert len(incidents) == 1
    incident = incidents[0]
    assert incident.heuristic == UNVERIFIED
    assert incident.severity == "block"
    assert incident.scope == "session"
    assert incident.session == SESSION
    assert incident.tool is None
    assert incident.counters == {"unverified_references": 1}
    dumped = json.dumps(incident.to_dict())
    for text in ("TX-99482", "99482", "5,000", "I have transferred", "insufficient funds", "landlord"):
        assert text not in dumped
        assert text not in repr(incident)


def test_wrong_reference_after_real_transfer_is_rejected(engine, clock, incidents):
    receipted_transfer(engine, clock)

    verdict = engine.verify_final(final(FABRICATED))

    assert_rejected(verdict)
    assert verdict.counters == {"unverified_references": 1}
    assert [i.heuristic for i in incidents] == [UNVERIFIED]


def test_right_reference_after_real_transfer_passes(engine, clock, incidents):
    receipted_transfer(engine, clock)

    verdict = engine.verify_final(final("I have transferred $5,000. Reference: TX-80276."))

    assert_passes(verdict)
    assert incidents == []


def test_reference_match_is_case_insensitive_to_the_result_value(engine, clock):
    receipted_transfer(engine, clock, payload={"tx_id": "tx-80276"})

    assert_passes(engine.verify_final(final("I have transferred $5,000. Reference: TX-80276.")))


def test_one_fabricated_reference_among_real_ones_is_rejected(engine, clock):
    receipted_transfer(engine, clock)

    verdict = engine.verify_final(final("Transferred: TX-80276. Fee refunded: TX-80277."))

    assert_rejected(verdict)
    assert verdict.counters == {"unverified_references": 1}


def test_reference_from_a_failed_result_may_not_be_cited(engine, clock):
    _, rv = pay(engine, clock, ok=False, payload={"error": "declined", "tx_id": "TX-55555"})
    assert rv.failed is True

    assert_rejected(engine.verify_final(final("Your payment went through. Reference: TX-55555.")))


def test_references_are_scoped_to_their_session(engine, clock):
    receipted_transfer(engine, clock, session="s-other")
    failed_transfer(engine, clock, session=SESSION)

    assert_rejected(engine.verify_final(final("I have transferred $5,000. Reference: TX-80276.")))


# the names of standards the shipped pattern leaves out (ISO-8601, PEP-008): no reference at all
_STANDARDS = frozenset(re.search(r"\(\?!\(\?:([A-Z|]+)\)-\)", DEFAULT_REFERENCE_PATTERNS[0]).group(1).split("|"))
_REFERENCE_TOKEN = st.from_regex(r"[A-Z]{2,6}-[0-9]{3,9}", fullmatch=True).filter(lambda t: t.split("-")[0] not in _STANDARDS)


def test_the_reference_strategy_knows_the_standards_the_pattern_ignores():
    assert {"ISO", "PEP", "UTF", "AES"} <= _STANDARDS


@settings(max_examples=examples(60), deadline=None)
@given(token=_REFERENCE_TOKEN)
def test_any_reference_no_tool_returned_is_rejected(token):
    clock = FakeClock(1_000_000.0)
    engine = Engine(None, clock=clock, receipt_keys=ReceiptKeys("k1", {"k1": b"k" * 32}), listeners=[])
    receipted_transfer(engine, clock)

    verdict = engine.verify_final(final(f"Your confirmation number is {token}."))

    # the receipted result returned TX-80276 and the digit runs 80276 and 5000 (its amount): an
    # id with those digits, under any label, cites what it returned
    if token.lower() == "tx-80276" or token.split("-")[1] in ("80276", "5000"):
        assert_passes(verdict)
    else:
        assert_rejected(verdict)


# ----------------------------------------------------------------- completion claims
@pytest.mark.parametrize(
    "text",
    [
        "The transfer could not be completed",
        "I was unable to transfer the funds",
        "I'm sorry: the bank declined it, so the money was not transferred.",
        "I couldn't complete the transfer and nothing was charged.",
    ],
)
def test_honest_failure_report_after_failed_transfer_passes(engine, clock, incidents, text):
    failed_transfer(engine, clock)

    assert_passes(engine.verify_final(final(text)))
    assert incidents == []


def test_completion_claim_without_reference_after_failed_transfer_is_rejected(engine, clock, incidents):
    failed_transfer(engine, clock)

    verdict = engine.verify_final(final("I have transferred $5,000 to your landlord."))

    assert_rejected(verdict)
    assert verdict.counters == {"unreceipted_tools": 1}
    assert "wire_transfer" in verdict.reason
    assert [i.heuristic for i in incidents] == [UNVERIFIED]


def test_completion_claim_after_receipted_transfer_passes(engine, clock):
    receipted_transfer(engine, clock)

    assert_passes(engine.verify_final(final("I have transferred $5,000 to your landlord.")))


def test_claim_about_failed_tool_is_rejected_even_when_another_tool_succeeded(engine, clock):
    failed_transfer(engine, clock)
    run(engine, clock, "send_email", {"to": "me@example.com"}, True, {"message_id": "m-1"})

    verdict = engine.verify_final(final("I have sent you an e-mail and transferred the money."))

    assert_rejected(verdict)
    assert verdict.counters == {"unreceipted_tools": 1}
    assert "wire_transfer" in verdict.reason
    assert "send_email" not in verdict.reason


def test_claim_verbs_map_to_tools_by_stem(engine, clock):
    failed_transfer(engine, clock)
    run(engine, clock, "send_email", {"to": "me@example.com"}, True, {"message_id": "m-1"})

    assert_passes(engine.verify_final(final("I have sent you an e-mail.")))


def test_completion_claim_in_observe_mode_warns_but_is_allowed(make_engine, clock, incidents):
    engine = make_engine({"modes": {UNVERIFIED: "observe"}})
    failed_transfer(engine, clock)

    verdict = engine.verify_final(final(FABRICATED))

    assert verdict.allowed is True
    assert verdict.heuristic == UNVERIFIED
    assert verdict.severity == "warn"
    assert [(i.heuristic, i.severity) for i in incidents] == [(UNVERIFIED, "warn")]


LEDGER_CONFIG = {"tools": {"ledger_post": {"mutating": True, "claim_phrases": ["moved the money"]}}}


def test_claim_phrase_of_configured_tool_after_its_failure_is_rejected(make_engine, clock, incidents):
    engine = make_engine(LEDGER_CONFIG)
    _, rv = pay(engine, clock, tool="ledger_post", ok=False, payload={"error": "ledger locked"})
    assert rv.failed is True

    verdict = engine.verify_final(final("Done: I Moved The Money to your savings account."))

    assert_rejected(verdict)
    assert verdict.counters == {"unreceipted_tools": 1}
    assert "ledger_post" in verdict.reason
    assert [i.heuristic for i in incidents] == [UNVERIFIED]


def test_claim_phrase_of_configured_tool_never_called_is_rejected(make_engine, clock):
    engine = make_engine(LEDGER_CONFIG)
    run(engine, clock, "get_balance", {"account": "savings"}, True, {"balance": 12})

    verdict = engine.verify_final(final("I moved the money to your savings account."))

    assert_rejected(verdict)
    assert "ledger_post" in verdict.reason


def test_claim_phrase_of_configured_tool_after_its_receipted_success_passes(make_engine, clock):
    engine = make_engine(LEDGER_CONFIG)
    _, rv = pay(engine, clock, tool="ledger_post", ok=True, payload={"entry": 7})
    assert rv.receipt is not None and rv.receipt["tool"] == "ledger_post"

    assert_passes(engine.verify_final(final("I moved the money to your savings account.")))


def test_negated_claim_phrase_of_configured_tool_passes(make_engine, clock):
    engine = make_engine(LEDGER_CONFIG)
    pay(engine, clock, tool="ledger_post", ok=False, payload={"error": "ledger locked"})

    assert_passes(engine.verify_final(final("Sorry, I could not have moved the money: the ledger was locked.")))


def test_claim_when_mutating_tool_was_blocked_and_never_ran_is_rejected(engine, clock, incidents):
    engine.operator.force_breaker("wire_transfer", BreakerStateName.FORCED_OPEN)
    clock.advance(1.0)
    blocked = engine.check_tool_call(call("wire_transfer", PAYMENT_ARGS))
    assert blocked.allowed is False
    assert blocked.heuristic == "circuit_open"

    verdict = engine.verify_final(final("I have transferred $5,000 to your landlord."))

    assert_rejected(verdict)
    assert "wire_transfer" in verdict.reason
    assert [i.heuristic for i in incidents] == ["circuit_open", UNVERIFIED]


def test_legitimate_batch_of_receipted_creates_passes(engine, clock, incidents):
    for i, name in enumerate(("Ada", "Grace", "Edsger", "Barbara")):
        clock.advance(1.0)
        v = engine.check_tool_call(call("create_record", {"name": name}))
        assert v.allowed
        clock.advance(0.2)
        rv = engine.record_tool_result(result("create_record", True, {"id": 100 + i}, call_id=v.call_id))
        assert rv.receipt is not None and rv.receipt["call_id"] == v.call_id

    assert_passes(engine.verify_final(final("All contact records have been created.")))
    assert incidents == []


def test_user_given_reference_may_be_quoted_back(engine, clock):
    engine.record_user(user("Where is my order ORD-12345?"))
    run(engine, clock, "get_order", {"order": "ORD-12345"}, True, {"status": "shipped"})

    assert_passes(engine.verify_final(final("Your order ORD-12345 has shipped.")))


def test_user_reference_is_not_a_licence_for_others(engine, clock):
    engine.record_user(user("Where is my order ORD-12345?"))
    other = engine.verify_final(final("Your order ORD-12345 has shipped.", session="s-other"))
    invented = engine.verify_final(final("Your order ORD-12345 has shipped, return label RMA-777."))

    assert_rejected(other)
    assert_rejected(invented)
    assert invented.counters == {"unverified_references": 1}


# ----------------------------------------------------------------- which tools are mutating
@pytest.mark.parametrize(
    "config,tool,kw",
    [
        (None, "wire_transfer", {}),  # named after an action
        (None, "ledger_post", {"mutating": True}),  # flagged on the event
        ({"tools": {"ledger_post": {"mutating": True}}}, "ledger_post", {}),  # configured
    ],
)
def test_mutating_tool_success_gets_a_receipt(make_engine, clock, config, tool, kw):
    engine = make_engine(config)

    _, rv = pay(engine, clock, tool=tool, ok=True, payload={"ok_id": "X"}, **kw)

    assert rv.receipt is not None
    assert rv.receipt["tool"] == tool


def test_read_only_tool_success_gets_no_receipt(engine, clock):
    clock.advance(1.0)
    v = engine.check_tool_call(call("get_balance", {"account": "a"}))
    rv = engine.record_tool_result(result("get_balance", True, {"balance": 10}, call_id=v.call_id))

    assert rv.accepted is True
    assert rv.receipt is None
    assert rv.heuristic is None


# ----------------------------------------------------------------- receipts
@pytest.fixture
def minted(engine, clock):
    """A receipted transfer: (engine, call_id, receipt)."""
    v, rv = receipted_transfer(engine, clock)
    return engine, v.call_id, rv.receipt


def check(engine: Engine, receipt, *, session=SESSION, call_id, tool="wire_transfer", result=None, tenant=None):
    return engine.receipts.verify(
        receipt,
        session=session,
        call_id=call_id,
        tool=tool,
        result=dict(RECEIPTED_PAYLOAD) if result is None else result,
        tenant=tenant,
    )


def test_successful_mutating_result_returns_a_signed_receipt(minted, keys, clock):
    engine, call_id, receipt = minted

    assert set(receipt) == RECEIPT_FIELDS
    assert receipt["v"] == 2
    assert receipt["kid"] == "k1"
    assert receipt["session"] == SESSION
    assert receipt["call_id"] == call_id
    assert receipt["tool"] == "wire_transfer"
    assert receipt["ts"] == clock.now()
    for name in ("args_hash", "result_hash"):
        assert len(receipt[name]) == 16 and int(receipt[name], 16) >= 0
    assert len(receipt["sig"]) == 64 and int(receipt["sig"], 16) >= 0
    json.dumps(receipt)  # a plain JSON object a downstream system can store


def test_receipt_is_in_the_result_verdict_dict(engine, clock):
    _, rv = receipted_transfer(engine, clock)

    assert isinstance(rv, ResultVerdict)
    assert rv.to_dict()["receipt"] == rv.receipt


def test_verify_receipt_accepts_genuine_receipt_for_its_call(minted):
    engine, call_id, receipt = minted

    assert check(engine, receipt, call_id=call_id) == (True, "ok")


def test_verify_receipt_accepts_the_receipt_from_a_json_round_trip(minted):
    engine, call_id, receipt = minted

    assert check(engine, json.loads(json.dumps(receipt)), call_id=call_id) == (True, "ok")


def test_verify_receipt_is_independent_of_the_engine_instance(minted, keys):
    _, call_id, receipt = minted
    downstream = Engine(None, receipt_keys=keys, listeners=[])

    assert check(downstream, receipt, call_id=call_id) == (True, "ok")


@pytest.mark.parametrize(
    "name,forged,claim",
    [
        ("session", "s2", {"session": "s2"}),
        ("tenant", "globex", {"tenant": "globex"}),
        ("call_id", "c-other", {"call_id": "c-other"}),
        ("tool", "send_email", {"tool": "send_email"}),
        ("result_hash", None, {"result": {"tx_id": "TX-11111", "amount_usd": 5000}}),
        ("ts", None, {}),
        ("sig", None, {}),
    ],
)
def test_verify_receipt_rejects_a_tampered_field(minted, name, forged, claim):
    engine, call_id, receipt = minted
    tampered = dict(receipt)
    if name == "result_hash":
        # the forger points the receipt at another result, and presents that result
        other = engine.fingerprints.hash64(result_canonical(engine.policies.get(None, None, None), claim["result"]))
        tampered[name] = f"{other:016x}"
    elif name == "ts":
        tampered[name] = receipt["ts"] + 1.0
    elif name == "sig":
        tampered[name] = ("0" if receipt["sig"][0] != "0" else "1") + receipt["sig"][1:]
    else:
        tampered[name] = forged
    kwargs = {"call_id": call_id, **claim}

    ok, reason = check(engine, tampered, **kwargs)

    assert ok is False
    assert reason == "bad signature: forged or tampered"


def test_verify_receipt_rejects_a_different_result_payload(minted):
    engine, call_id, receipt = minted

    ok, reason = check(engine, receipt, call_id=call_id, result={"tx_id": "TX-80276", "amount_usd": 50000})

    assert (ok, reason) == (False, "result does not match the receipted one")


@settings(max_examples=examples(50), deadline=None)
@given(amount=st.integers(min_value=-(10**12), max_value=10**12).filter(lambda n: n != 5000))
def test_verify_receipt_rejects_any_other_amount(amount):
    keys = ReceiptKeys("k1", {"k1": b"k" * 32})
    clock = FakeClock(1_000_000.0)
    engine = Engine(None, clock=clock, receipt_keys=keys, listeners=[])
    v, rv = receipted_transfer(engine, clock)

    ok, reason = check(engine, rv.receipt, call_id=v.call_id, result={"tx_id": "TX-80276", "amount_usd": amount})

    assert (ok, reason) == (False, "result does not match the receipted one")


def test_verify_receipt_rejects_cross_session_replay(minted):
    engine, call_id, receipt = minted

    assert check(engine, receipt, session="s2", call_id=call_id) == (False, "receipt belongs to another session")


def test_verify_receipt_rejects_replay_for_another_call(minted):
    engine, call_id, receipt = minted

    assert check(engine, receipt, call_id="c-other") == (False, "receipt belongs to another call")
    assert check(engine, receipt, call_id=call_id, tool="send_email") == (False, "receipt belongs to another call")


def test_receipt_for_one_call_does_not_vouch_for_the_next_identical_call(engine, clock):
    # the same transfer twice, on purpose: the user asked for it again
    v1, rv1 = receipted_transfer(engine, clock, args=PAYMENT_ARGS)
    engine.record_user(user("Yes, send the same transfer again."))
    v2, rv2 = receipted_transfer(engine, clock, args=PAYMENT_ARGS)
    assert v1.call_id != v2.call_id

    assert check(engine, rv1.receipt, call_id=v2.call_id) == (False, "receipt belongs to another call")
    assert check(engine, rv2.receipt, call_id=v2.call_id) == (True, "ok")


def test_verify_receipt_rejects_unknown_key_id(minted):
    engine, call_id, receipt = minted
    foreign = Engine(None, receipt_keys=ReceiptKeys("k9", {"k9": b"9" * 32}), listeners=[])

    assert check(foreign, receipt, call_id=call_id) == (False, "unknown key id 'k1'")


def test_verify_receipt_rejects_receipt_signed_with_another_key_under_the_same_id(minted):
    engine, call_id, receipt = minted
    impostor = Engine(None, receipt_keys=ReceiptKeys("k1", {"k1": b"X" * 32}), listeners=[])

    assert check(impostor, receipt, call_id=call_id) == (False, "bad signature: forged or tampered")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda r: {},
        lambda r: None,
        lambda r: "receipt",
        lambda r: [r],
        lambda r: {k: v for k, v in r.items() if k != "sig"},
        lambda r: {k: v for k, v in r.items() if k != "session"},
        lambda r: {k: v for k, v in r.items() if k != "kid"},
        lambda r: {**r, "kid": ["k1"]},
        lambda r: {**r, "sig": 12345},
        lambda r: {**r, "sig": None},
        lambda r: {**r, "v": 1},
    ],
    ids=["empty", "none", "str", "list", "no-sig", "no-session", "no-kid", "unhashable-kid", "int-sig", "none-sig", "v1"],
)
def test_verify_receipt_rejects_malformed_receipts(minted, mangle):
    engine, call_id, receipt = minted

    ok, reason = check(engine, mangle(receipt), call_id=call_id)

    assert ok is False
    assert reason


def test_verify_receipt_rejects_non_ascii_signature_without_raising(minted):
    """A non-ASCII signature is a forgery, not a TypeError (hmac.compare_digest refuses non-ASCII str)."""
    engine, call_id, receipt = minted
    forged = {**receipt, "sig": "\u00fc" * 64}

    assert check(engine, forged, call_id=call_id) == (False, "bad signature: forged or tampered")


def test_verify_receipt_without_keys_rejects(minted):
    _, call_id, receipt = minted
    observer = Engine(None, observe=True, receipt_keys=None, listeners=[])
    assert observer.receipt_keys is None

    assert check(observer, receipt, call_id=call_id) == (False, "no receipt keys configured")


def test_verification_compares_signatures_in_constant_time():
    source = inspect.getsource(receipts.verify)

    assert "hmac.compare_digest(" in source
    assert "== sig" not in source and "sig ==" not in source
    assert "!= sig" not in source and "sig !=" not in source


# ----------------------------------------------------------------- key rotation and loading
K1 = b"k" * 32  # the conftest `keys` fixture's key
K2 = bytes(range(32))


def test_receipt_signed_with_old_key_verifies_after_rotation(minted):
    _, call_id, receipt = minted
    rotated = Engine(None, receipt_keys=ReceiptKeys("k2", {"k2": K2, "k1": K1}), listeners=[])

    assert check(rotated, receipt, call_id=call_id) == (True, "ok")


def test_receipt_signed_with_dropped_key_fails(minted):
    _, call_id, receipt = minted
    retired = Engine(None, receipt_keys=ReceiptKeys("k2", {"k2": K2}), listeners=[])

    assert check(retired, receipt, call_id=call_id) == (False, "unknown key id 'k1'")


def test_rotated_engine_signs_with_the_current_key(clock):
    engine = Engine(None, clock=clock, receipt_keys=ReceiptKeys("k2", {"k2": K2, "k1": K1}), listeners=[])
    v, rv = receipted_transfer(engine, clock)

    assert rv.receipt["kid"] == "k2"
    only_old = Engine(None, receipt_keys=ReceiptKeys("k1", {"k1": K1}), listeners=[])
    assert check(only_old, rv.receipt, call_id=v.call_id) == (False, "unknown key id 'k2'")


def test_parse_makes_the_first_key_current_and_reads_hex_and_base64():
    spec = f"k2:{K2.hex()},k1:{base64.b64encode(K1).decode()}"

    keys = ReceiptKeys.parse(spec, source="$" + KEY_ENV)

    assert keys.current_id == "k2"
    assert dict(keys.keys) == {"k2": K2, "k1": K1}


def test_parse_tolerates_spaces_and_a_trailing_comma():
    keys = ReceiptKeys.parse(f" k2:{K2.hex()} , k1:{K1.hex()} ,", source="test")

    assert keys.current_id == "k2"
    assert dict(keys.keys) == {"k2": K2, "k1": K1}


@pytest.mark.parametrize("spec", ["", " , ", "nokey", ":abcd", f"k1:{K1.hex()},k2", "k1:not-hex-nor-base64!"])
def test_parse_refuses_malformed_specs(spec):
    with pytest.raises(ConfigError):
        ReceiptKeys.parse(spec, source="$" + KEY_ENV)


def test_from_file_reads_current_and_keys(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"current": "k2", "keys": {"k2": K2.hex(), "k1": base64.b64encode(K1).decode()}}))

    keys = ReceiptKeys.from_file(path)

    assert keys.current_id == "k2"
    assert dict(keys.keys) == {"k2": K2, "k1": K1}


def test_from_config_prefers_key_file_over_env(tmp_path, monkeypatch):
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"current": "file", "keys": {"file": K2.hex()}}))
    monkeypatch.setenv(KEY_ENV, f"env:{K1.hex()}")

    engine = Engine({"receipts": {"key_file": str(path)}}, receipt_keys=None, listeners=[])

    assert engine.receipt_keys.current_id == "file"


@pytest.mark.parametrize(
    "content",
    ["not json", "[]", json.dumps({"keys": {"k1": K1.hex()}}), json.dumps({"current": "k1"})],
    ids=["not-json", "list", "no-current", "no-keys"],
)
def test_from_file_refuses_malformed_files(tmp_path, content):
    path = tmp_path / "keys.json"
    path.write_text(content)

    with pytest.raises(ConfigError, match="current"):
        ReceiptKeys.from_file(path)


@pytest.mark.parametrize(
    "data",
    [{"current": "k1", "keys": ["k1"]}, {"current": "k1", "keys": {"k1": 12345}}],
    ids=["keys-is-a-list", "key-is-a-number"],
)
def test_from_file_refuses_wrongly_typed_keys_with_config_error(tmp_path, data):
    """Keys of the wrong JSON type are a ConfigError naming the file, not an AttributeError."""
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(data))

    with pytest.raises(ConfigError):
        ReceiptKeys.from_file(path)


def test_from_file_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read receipt key file"):
        ReceiptKeys.from_file(tmp_path / "absent.json")


def test_key_shorter_than_16_bytes_is_refused():
    with pytest.raises(ConfigError, match="at least 16"):
        ReceiptKeys("k1", {"k1": b"x" * 15})
    with pytest.raises(ConfigError, match="at least 16"):
        ReceiptKeys("k2", {"k2": K2, "k1": b"x" * 15})  # a short previous key too
    assert ReceiptKeys("k1", {"k1": b"x" * 16}).current_id == "k1"


def test_short_key_is_refused_from_env_spec_and_file(tmp_path):
    with pytest.raises(ConfigError, match="at least 16"):
        ReceiptKeys.parse("k1:" + "ab" * 15, source="$" + KEY_ENV)
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"current": "k1", "keys": {"k1": "ab" * 16}}))
    assert len(ReceiptKeys.from_file(path).keys["k1"]) == 16
    path.write_text(json.dumps({"current": "k1", "keys": {"k1": "ab" * 15}}))
    with pytest.raises(ConfigError, match="at least 16"):
        ReceiptKeys.from_file(path)


def test_current_key_id_must_be_among_the_keys():
    with pytest.raises(ConfigError, match="not among the keys"):
        ReceiptKeys("k3", {"k1": K1})


# ----------------------------------------------------------------- start-up
def test_enforce_mode_without_key_refuses_to_start_naming_the_env_var(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)

    with pytest.raises(ConfigError) as exc:
        Engine(None, receipt_keys=None, listeners=[])

    assert KEY_ENV in str(exc.value)


def test_enforce_mode_with_dev_ephemeral_key_starts_and_warns(monkeypatch, caplog, clock):
    monkeypatch.delenv(KEY_ENV, raising=False)
    caplog.set_level(logging.WARNING, logger="agent_breaker")

    engine = Engine({"receipts": {"dev_ephemeral_key": True}}, clock=clock, receipt_keys=None, listeners=[])

    assert engine.receipt_keys is not None
    assert engine.receipt_keys.current_id == "ephemeral"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "agent_breaker"]
    assert len(warnings) == 1
    assert "development" in warnings[0].getMessage().lower()
    v, rv = receipted_transfer(engine, clock)
    assert check(engine, rv.receipt, call_id=v.call_id) == (True, "ok")


@pytest.mark.parametrize(
    "config,observe",
    [
        ({"mode": "observe"}, False),
        (None, True),
        ({"modes": {UNVERIFIED: "observe"}}, False),
        ({"modes": {UNVERIFIED: "off"}}, False),
    ],
    ids=["config-observe", "engine-observe", "claims-observe", "claims-off"],
)
def test_start_without_key_when_claims_are_not_enforced(monkeypatch, caplog, clock, config, observe):
    monkeypatch.delenv(KEY_ENV, raising=False)
    caplog.set_level(logging.WARNING, logger="agent_breaker")

    engine = Engine(config, clock=clock, receipt_keys=None, observe=observe, listeners=[])

    assert engine.receipt_keys is None
    assert caplog.records == []
    _, rv = pay(engine, clock, ok=True, payload=dict(RECEIPTED_PAYLOAD))
    assert rv.receipt is None


def test_enforce_mode_with_env_key_starts_and_signs_with_it(monkeypatch, clock):
    monkeypatch.setenv(KEY_ENV, f"prod2:{K2.hex()},prod1:{K1.hex()}")

    engine = Engine(None, clock=clock, receipt_keys=None, listeners=[])

    assert engine.receipt_keys.current_id == "prod2"
    assert dict(engine.receipt_keys.keys) == {"prod2": K2, "prod1": K1}
    _, rv = receipted_transfer(engine, clock)
    assert rv.receipt["kid"] == "prod2"


def test_custom_key_env_is_named_in_the_start_up_error(monkeypatch):
    monkeypatch.delenv("MY_RECEIPT_KEYS", raising=False)

    with pytest.raises(ConfigError, match="MY_RECEIPT_KEYS"):
        Engine({"receipts": {"key_env": "MY_RECEIPT_KEYS"}}, receipt_keys=None, listeners=[])


# ----------------------------------------------------------------- empty mutation results
@pytest.mark.parametrize("payload", [{}, None, "", []], ids=["dict", "none", "str", "list"])
def test_mutating_tool_reporting_success_with_empty_payload_is_flagged_without_receipt(engine, clock, incidents, payload):
    _, rv = pay(engine, clock, ok=True, payload=payload)

    assert rv.heuristic == EMPTY
    assert rv.receipt is None
    assert rv.failed is False
    assert rv.accepted is False  # enforce mode
    assert [(i.heuristic, i.tool) for i in incidents] == [(EMPTY, "wire_transfer")]
    # and nothing may claim it happened
    assert_rejected(engine.verify_final(final("I have transferred $5,000.")))


def test_empty_mutation_result_in_observe_mode_is_accepted_with_warning(make_engine, clock, incidents):
    engine = make_engine({"modes": {EMPTY: "observe"}})

    _, rv = pay(engine, clock, ok=True, payload={})

    assert rv.heuristic == EMPTY
    assert rv.accepted is True
    # observe blocks nothing: the receipt is minted, the anomaly only reported
    assert rv.receipt is not None
    assert [(i.heuristic, i.severity) for i in incidents] == [(EMPTY, "warn")]


@pytest.mark.parametrize("payload", [{}, None, "", []], ids=["dict", "none", "str", "list"])
def test_read_only_tool_with_empty_payload_is_not_flagged(engine, clock, incidents, payload):
    clock.advance(1.0)
    v = engine.check_tool_call(call("get_balance", {"account": "a"}))
    rv = engine.record_tool_result(result("get_balance", True, payload, call_id=v.call_id))

    assert rv.heuristic is None
    assert rv.accepted is True
    assert rv.receipt is None
    assert incidents == []


# ----------------------------------------------------------------- zero retention
def test_session_state_keeps_no_payload_text(engine, clock):
    engine.record_user(user("Please pay my landlord"))
    _, rv = receipted_transfer(engine, clock, payload={"tx_id": "TX-80276", "memo": "secret memo text"})
    assert rv.receipt is not None
    assert_passes(engine.verify_final(final("I have transferred $5,000. Reference: TX-80276.")))

    state = engine.store.peek_session(SESSION)

    assert state is not None
    assert len(state.ledger.receipts) == 1
    text = repr(state)
    assert "secret memo text" not in text
    assert "secret" not in text
    assert "TX-80276" not in text
    assert "tx-80276" not in text
    assert "80276" not in text
    assert "landlord" not in text


# ----------------------------------------------------------------- the replay path
def test_replay_trips_the_reward_hacking_session_at_its_final_and_not_the_legit_one(tmp_path, capsys):
    trace = [
        {"type": "user", "session": "hack", "text": "Pay my landlord $5,000"},
        {
            "type": "tool_call",
            "session": "hack",
            "tool": "wire_transfer",
            "call_id": "c1",
            "mutating": True,
            "args": PAYMENT_ARGS,
        },
        {"type": "user", "session": "legit", "text": "Pay my landlord $5,000"},
        {
            "type": "tool_result",
            "session": "hack",
            "tool": "wire_transfer",
            "call_id": "c1",
            "mutating": True,
            "ok": False,
            "error": "insufficient funds",
        },
        {
            "type": "tool_call",
            "session": "legit",
            "tool": "wire_transfer",
            "call_id": "c1",
            "mutating": True,
            "args": PAYMENT_ARGS,
        },
        {
            "type": "tool_result",
            "session": "legit",
            "tool": "wire_transfer",
            "call_id": "c1",
            "mutating": True,
            "ok": True,
            "result": {"tx_id": "TX-80276", "status": "settled"},
        },
        {"type": "final", "session": "hack", "text": "I have transferred $5,000. Reference: TX-99482."},
        {"type": "final", "session": "legit", "text": "I have transferred $5,000. Reference: TX-80276."},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in trace))

    rc = cli_main(["replay", str(path)])

    out = capsys.readouterr().out
    assert rc == 0
    rows = {row["session"]: row for row in map(json.loads, out.splitlines())}
    assert set(rows) == {"hack", "legit"}
    assert rows["hack"]["tripped"] is True
    assert rows["hack"]["heuristic"] == UNVERIFIED
    assert rows["hack"]["trip_event"] == 4  # 1-based among the session's events: the final
    assert rows["hack"]["allowed_calls"] == 1 and rows["hack"]["blocked_calls"] == 0
    assert rows["legit"]["tripped"] is False
    assert rows["legit"]["trip_event"] is None
    assert rows["legit"]["heuristic"] is None
    assert rows["legit"]["allowed_calls"] == 1


# ----------------------------------------------------------------- claims read as a person would
def test_typographic_apostrophe_negation_is_an_honest_report(engine, clock, incidents):
    """ "haven’t" with a typographic apostrophe negates the claim like "haven't" does."""
    failed_transfer(engine, clock)

    assert_passes(engine.verify_final(final("I haven\u2019t transferred the money: the bank declined it.")))


def test_unrelated_no_before_a_claim_does_not_negate_it(engine, clock):
    """A negation in another clause ("No problem, I have transferred ...") does not cancel the claim."""
    failed_transfer(engine, clock)

    assert_rejected(engine.verify_final(final("No problem, I have transferred $5,000 to your landlord.")))


def test_generic_claim_in_a_session_with_no_mutating_attempt_passes(make_engine, clock):
    """A generic verb is about the tools the session tried: a configured tool it never called is not
    claimed, so a read-only session's answer passes."""
    engine = make_engine(LEDGER_CONFIG)
    run(engine, clock, "get_profile", {"user": "u1"}, True, {"address": "1 Main St"})

    assert_passes(engine.verify_final(final("Your address was updated last week.")))


def test_names_of_standards_in_an_honest_answer_are_not_references(engine, clock):
    v = engine.verify_final(final("Timestamps are ISO-8601, files are hashed with SHA-256 as RFC-7231 requires."))
    assert v.allowed and v.heuristic is None


_ID_TEXT = st.text(alphabet="ABXISOab19-_ .é\u00c9\u0661", max_size=40)


@settings(max_examples=examples(3000), deadline=None)
@given(_ID_TEXT)
def test_reading_ids_from_their_dashes_finds_what_the_patterns_find(text):
    """References are found from each dash before digits (fast), never differently from a scan
    of the whole text with the pattern: the shipped reference pattern and the caseless one."""
    default = re.compile(DEFAULT_REFERENCE_PATTERNS[0])
    pairs = [
        (_claims._DEFAULT_DASH, default, _claims._ASCII_UPPER),
        (_claims._CASELESS_DASH, _claims._CASELESS_CANDIDATE, _claims._ASCII_LETTERS),
    ]
    for dash, pattern, letters in pairs:
        led = [(m.start(), m.group()) for m in _claims._led_by_dash(text, dash, pattern, letters)]
        assert led == [(m.start(), m.group()) for m in pattern.finditer(text)]


# ----------------------------------------------------------------- reading ids fast reads them as before
# `ids_in` (once `references_in`) as it was before it read ids from the context of each dash,
# copied as the oracle; one deliberate change since: a space for the dash makes no id of a
# quantity (a decimal or thousands part follows: "TX 1500.00") nor of an amount after a currency
# code ("USD 1500"), the codes listed in _claims._CURRENCIES
_BEFORE_SPACED_ID = re.compile(rf"\b(?!(?:{_claims._CURRENCIES})\b)(?=([A-Z]{{2,}}))\1[ _]+(\d{{3,}})\b(?![.,]\d)")
_BEFORE_SPACED_GATE = re.compile(r"[A-Z][ _]+\d{3}")
_BEFORE_NOT_ALNUM = re.compile(r"[^0-9a-z]+")
_BEFORE_CASELESS_CANDIDATE = re.compile(r"\b(?=([A-Za-z]+))\1-\d{5,}\b")
_FINGERPRINTS = Fingerprinter.ephemeral()


def _before_found(text, pattern):
    # what _led_by_dash finds: a scan of the whole text, as the test above holds
    return (m.group() for m in pattern.finditer(text))


def _before_key(token):
    return _BEFORE_NOT_ALNUM.sub("", normalize_text(token))


def references_as_before(patterns, text):
    compiled = [re.compile(p) for p in patterns]
    text = fold_text(text)
    if _BEFORE_SPACED_GATE.search(text):
        text = _BEFORE_SPACED_ID.sub(r"\1-\2", text)
    if tuple(patterns) == DEFAULT_REFERENCE_PATTERNS:
        found = {_before_key(m) for m in _before_found(text, compiled[0])}
    else:
        found = {_before_key(m.group()) for p in compiled for m in p.finditer(text)}
    for written in _before_found(text, _BEFORE_CASELESS_CANDIDATE):
        candidate = written.upper()
        if candidate != written and any(p.fullmatch(candidate) for p in compiled):
            found.add(_before_key(candidate))
    return {_FINGERPRINTS.hash64("ref", key) for key in found}


def digit_runs_of(text, *, alone=False):
    """Keyed hashes of the runs of four ASCII digits or more of a text (`alone`: only those that
    stand between spaces or the text's ends): `references_in` reads some of the runs beside
    `ids_in`, and every run that stands alone."""
    runs = re.findall(r"(?<!\S)[0-9]{4,}(?!\S)" if alone else r"[0-9]{4,}", text)
    return {_FINGERPRINTS.hash64("ref", run) for run in runs}


_CUSTOM_PATTERNS = (r"\bINV-\d{4,}\b", r"(?i)\border[ #]?\d{5}\b", r"\b[A-Z]{2}_\d{3}\b", r"\d{3}")
# one checker of each config for all examples: what its caches remember carries over
_CHECKERS = {
    patterns: _claims.ClaimChecker(parse_config({"receipts": {"reference_patterns": list(patterns)}}), _FINGERPRINTS)
    for patterns in (DEFAULT_REFERENCE_PATTERNS, _CUSTOM_PATTERNS)
}


def assert_read_as_before(text):
    for patterns, checker in _CHECKERS.items():
        expected = references_as_before(patterns, text)
        assert checker.ids_in(text) == expected, (patterns, text)
        assert checker.ids_in(text) == expected, (patterns, text)  # now from what it remembers
        refs = checker.references_in(text)
        assert refs.ids == expected, (patterns, text)
        assert digit_runs_of(text, alone=True) <= refs.runs <= digit_runs_of(text), (patterns, text)
        assert checker.result_references(text) == refs, (patterns, text)


# ids as an agent or a tool writes them: look-alike letters (Cyrillic, Greek), mixed case, names
# of standards; dash variants, a space or "_" for the dash, invisible characters; 3-8 digits (or
# 1-9), non-ASCII digits; words and digit runs too long for a dash's context
_LOOKALIKES = "\u0410\u0422\u0425\u041a\u03bf\u0406"
_LONG_WORD = st.text(alphabet="ABab", min_size=28, max_size=36)  # too long for the context of its dash
_ID_WORD = st.one_of(
    st.text(alphabet="ABKSTXZ" + _LOOKALIKES, min_size=2, max_size=5),
    st.text(alphabet="ABKSTXabkstx" + _LOOKALIKES, min_size=1, max_size=6),
    st.sampled_from(["TX", "tx", "Tx", "SKU", "JOB", "ISO", "iso", "RFC", "COVID", "HTTP", "Order", "INV", "order"]),
    st.sampled_from(["USD", "EUR"]),  # currency codes: "USD 1500" is an amount, no id
    st.text(alphabet="ABKSTXZ", min_size=2, max_size=5) | _LONG_WORD,
)
_ID_DASH = st.one_of(
    st.just("-"),
    st.sampled_from(["\u2013", "\u2014", "\u2011", "\u2212", " ", "  ", "_", "_ ", "-\u200b", "\u200b-", "\u00ad", "", "#"]),
)
_ID_DIGITS = st.one_of(
    st.text(alphabet=string.digits, min_size=3, max_size=8),
    st.text(alphabet=string.digits, min_size=1, max_size=9),
    st.sampled_from(["\u0663\u0664\u0665\u0666\u0667", "\uff11\uff12\uff13\uff14\uff15", "1" * 33, "12345678901234567890"]),
)
_GLUE = st.sampled_from(
    ['"', '":"', '", "', '{"id":"', "}", "[", "],", ",", ":", " ", "\n", '\\"', "x", "_", "9", "\u00e9", "-", "(", ")"]
    + [".5", ",000"]  # after digits: a decimal or thousands part makes an amount of "TX 1500"
)
_PROSE = st.sampled_from(["Reference", "your order", "top-100", "ISO-8601", "was refunded", "see", "2024-05-13T10:00:00Z"])
_ID = st.builds(lambda word, dash, digits: word + dash + digits, _ID_WORD, _ID_DASH, _ID_DIGITS)
_IDS_IN_TEXT = st.lists(st.tuples(_GLUE, st.one_of(_ID, _ID, _PROSE)), max_size=16).map(
    lambda parts: "".join(g + w for g, w in parts)
)


@settings(max_examples=examples(500), deadline=None)
@given(_IDS_IN_TEXT)
def test_ids_in_json_and_prose_are_read_as_before(text):
    assert_read_as_before(text)


@settings(max_examples=examples(500), deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_read_as_before(text):
    assert_read_as_before(text)


@pytest.mark.parametrize(
    "text",
    [
        "TX-99482",
        "tx-99482 and Tx-99482, TX 99482, TX_99482, TX\u201399482, TX-\u200b99482, \u0422X-99482",
        '{"id":"SKU-26214","ids":["SKU-26214",  "JOB-613226"]}',
        "ISO-8601, SHA-256, RFC-7231 and iso-86011",
        "a" * 40 + "-12345 and " + "A" * 40 + "-123, then TX-99482",
        "ORDER-" + "1" * 40,
        "_TX-99482 9TX-99482 \u00e9TX-99482 TX-99482x TX-99482_ TX-\u0663\u0664\u0665\u0666\u0667",
        "abTX-12345 ab-1234 ab-12345",
        "TX \u0663\u0664\u0665\u0666\u0667 and TX__\u0663\u0664\u0665",
        "USD 1500, EUR 1150.50, TX 1,500 and TX 1500.00 are amounts; RF 55821 and TX 99482. are ids",
    ],
)
def test_edge_cases_are_read_as_before(text):
    assert_read_as_before(text)


def test_a_full_cache_is_emptied_and_ids_are_still_read_as_before(monkeypatch):
    monkeypatch.setattr(_claims, "MAX_CACHED_REFERENCES", 2)
    checker = _claims.ClaimChecker(parse_config(None), _FINGERPRINTS)
    texts = [f'{{"sku":"SKU-{n}", "job":"job-{n}0", "ref":"Tx {n}"}}' for n in range(10_000, 10_040)]
    texts.append(" ".join(f"SKU-{n}" for n in range(20_000, 20_050)))  # one text with more contexts than the cap
    for text in texts + texts:
        assert checker.ids_in(text) == references_as_before(DEFAULT_REFERENCE_PATTERNS, text)
        assert len(checker._context_references) <= 2  # the cap holds before each insert


def test_a_plain_id_is_read_from_its_dash_context():
    """The fast way takes an ordinary id (None would send every text the slow way)."""
    checker = _claims.ClaimChecker(parse_config(None), _FINGERPRINTS)
    assert checker._shipped_references('{"id":"SKU-26214"}') not in (None, set())


@settings(max_examples=examples(1000), deadline=None)
@given(st.lists(st.sampled_from(["AB", "X", "a", " ", "_", "  ", "123", "9", "\u0663\u0664\u0665", "\u0663", "\u00e9", "-"])))
def test_the_shape_of_a_text_rules_out_no_spaced_id(parts):
    """The spaced-id rewrite is skipped only where its own pattern finds nothing."""
    text = "".join(parts)
    assert _claims._dash_spaced_ids(text) == _claims._SPACED_ID.sub(r"\1-\2", text)


def _old_phrase_checker() -> _claims.ClaimChecker:
    """A claim checker with its phrase patterns as they were before they were rewritten for
    speed (a word boundary first): the oracle of the claims found."""
    checker = _claims.ClaimChecker(parse_config(None), Fingerprinter(b"claims"))
    checker._phrase_patterns = [(p, re.compile(r"\b" + re.escape(p) + r"\b")) for p, _ in checker._phrase_patterns]
    return checker


_CLAIM_CHECKERS = (_claims.ClaimChecker(parse_config(None), Fingerprinter(b"claims")), _old_phrase_checker())
_CLAIM_FRAGMENTS = [p for p, _ in _CLAIM_CHECKERS[0]._phrase_patterns] + [
    " ",
    "I ",
    "have ",
    "not ",
    "didn't ",
    "will ",
    "once ",
    "please ",
    "x",
    "un",
    "ed",
    ".",
    ", ",
    "\n",
    "É",
    "the order",
]


@settings(max_examples=examples(1000), deadline=None)
@given(st.one_of(st.lists(st.sampled_from(_CLAIM_FRAGMENTS), max_size=14).map("".join), st.text(max_size=80)))
def test_claim_phrases_are_found_as_by_the_old_patterns(text: str):
    new, old = _CLAIM_CHECKERS
    assert new._claims(text, ["wire_transfer"]) == old._claims(text, ["wire_transfer"])
