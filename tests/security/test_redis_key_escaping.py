"""Redis keys: the caller's part of every key is escaped, so no session id, tool, tenant or
feature can reach another key or move the Redis Cluster hash tag."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_breaker import Engine, FakeClock, ReceiptKeys
from agent_breaker.breaker import BreakerStateName as S
from agent_breaker.store.base import escape_key_part, key_parts

# the characters that matter, often, and any others
TRICKY = st.sampled_from(list("%:{}\x1f\x00\x7f\x85\ud800\udfffaA0é ")) | st.characters(exclude_categories=())
TEXT = st.text(TRICKY, max_size=12)


def store(prefix: str = "ab"):
    pytest.importorskip("redis")
    from agent_breaker.store.redis import RedisStore

    # no command is sent: building keys needs no server
    return RedisStore("redis://127.0.0.1:1/0", prefix=prefix, listen=False)


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: between the first '{' and the first '}' after it."""
    start = key.index("{")
    return key[start + 1 : key.index("}", start + 1)]


@given(st.lists(TEXT, unique=True, max_size=40))
@settings(max_examples=examples(300), deadline=None)
def test_escaping_is_injective(parts):
    escaped = [escape_key_part(p) for p in parts]
    assert len(set(escaped)) == len(parts)
    for p, e in zip(parts, escaped, strict=True):
        assert unquote(e, errors="surrogatepass") == p  # it can be undone: distinct in, distinct out
        assert not set(e) & set(":{}")


@given(st.lists(st.tuples(TEXT, TEXT), unique=True, max_size=40))
@settings(max_examples=examples(200), deadline=None)
def test_joined_key_parts_are_injective(pairs):
    assert len({key_parts(*pair) for pair in pairs}) == len(pairs)


@given(st.lists(TEXT, unique=True, min_size=1, max_size=20))
@settings(max_examples=examples(100), deadline=None)
def test_every_redis_key_keeps_one_balanced_hash_tag_and_no_two_keys_meet(keys):
    s = store()
    try:
        built = []
        for k in keys:
            for kind, rkey in (("s", s.session_key(k)), ("b", s.breaker_key(k)), ("g", s.spend_key(k, 7))):
                assert rkey.count("{") == 1 and rkey.count("}") == 1
                assert hash_tag(rkey) == f"{kind}:{escape_key_part(k)}"
                built.append(rkey)
        assert len(set(built)) == len(built)
    finally:
        s.close()


def test_a_session_id_with_a_closing_brace_keeps_its_hash_tag():
    s = store()
    try:
        key = s.session_key("victim}:merged:0123")  # would have closed the tag and looked like a marker
        assert hash_tag(key) == "s:victim%7D%3Amerged%3A0123"
        assert key == "ab:{s:victim%7D%3Amerged%3A0123}"
        assert s.session_key("acme\x1fs1") == "ab:{s:acme%1Fs1}"  # tenant and id stay apart
        assert s.session_key("plain-id_1.x") == "ab:{s:plain-id_1.x}"  # ordinary ids read as before
    finally:
        s.close()


def test_two_tenants_and_features_that_join_alike_get_different_spend_keys():
    s = store()
    try:
        a = s.spend_key(key_parts("a:b", "c"), 12)
        b = s.spend_key(key_parts("a", "b:c"), 12)
        assert a != b
        assert hash_tag(a) != hash_tag(b)
    finally:
        s.close()


def test_a_key_prefix_with_braces_is_refused():
    with pytest.raises(ValueError, match="hash tags"):
        store("a{b}")


def test_spend_of_tenants_that_join_alike_stays_apart_on_redis(redis_store):
    assert redis_store.add_spend(key_parts("a:b", "c"), 100, 1.0, 3600, 1000.0) == (100.0, 1.0)
    assert redis_store.add_spend(key_parts("a", "b:c"), 7, 0.5, 3600, 1000.0) == (7.0, 0.5)


def test_ids_full_of_key_syntax_round_trip_on_redis(redis_store):
    engine = Engine(store=redis_store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys("k1", {"k1": b"k" * 32}))
    for sid in ("x}y", "{s:x}", "%7D", "a:b", "%"):
        assert engine.check_tool_call({"session": sid, "tool": "t:{x}", "args": {"sid": sid}}).allowed
        assert redis_store.peek_session(sid).spend.steps == 1
    keys = {k.decode() for k in redis_store.redis.scan_iter(match=f"{redis_store.prefix}:*")}
    assert all(k.count("{") == 1 and k.count("}") == 1 for k in keys)


# The engine joins tenant and feature (spend) and tenant and tool (breakers) with ':' before the
# store sees them; until engine.py builds those keys with store.base.key_parts, tenants whose
# names join alike share them. strict: these start passing (and must lose the mark) with that edit.
def test_engine_keeps_the_spend_of_tenants_that_join_alike_apart(make_engine, clock):
    engine = make_engine({"global_budget": {"max_tokens": 15_000, "window_s": 3600}, "budget": {"max_tokens": None}})
    clock.advance(1)
    assert engine.check_tool_call(
        {"session": "x", "tenant": "a:b", "feature": "c", "tool": "t", "args": {}, "input_tokens": 10_000}
    ).allowed
    clock.advance(1)
    v = engine.check_tool_call({"session": "y", "tenant": "a", "feature": "b:c", "tool": "t", "args": {}, "input_tokens": 10_000})
    assert v.allowed, v.heuristic


def test_engine_keeps_the_breakers_of_tenants_that_join_alike_apart(make_engine):
    engine = make_engine({"breaker": {"key_by_tenant": True}})
    engine.operator.force_breaker("c", "forced_open", tenant="a:b")
    assert engine.operator.breaker_state("b:c", tenant="a") is S.CLOSED
