"""The session encoding round-trips every field of every slice (hypothesis), and a breaker has
one encoding: the Redis script's."""

from __future__ import annotations

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_breaker._ledger import HashPool, Ledger
from agent_breaker._state import (
    MAX_CHURN_CHAINS,
    MAX_VALUES,
    Answer,
    CallFacts,
    Chain,
    ChurnChain,
    ChurnView,
    Effects,
    Failing,
    Failures,
    KeyStat,
    Loops,
    Pending,
    Retried,
    SessionState,
    Spend,
)
from agent_breaker._windows import BucketWindow
from agent_breaker.breaker import BreakerState, BreakerStateName
from agent_breaker.store import codec

ids = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
hash_or_failed = st.one_of(u64, st.just(-1))
fps = st.lists(u32, max_size=6).map(tuple)
values = st.lists(u32, max_size=MAX_VALUES).map(lambda v: tuple(sorted(v)))  # a call's argument values
times = st.floats(0, 1e10, allow_nan=False)
money = st.floats(0, 1e6, allow_nan=False)


@st.composite
def windows(draw, width: int) -> BucketWindow:
    buckets = draw(st.lists(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=width + 1, max_size=width + 1), max_size=3))
    return BucketWindow(
        draw(st.floats(1, 600)),
        draw(st.floats(0.1, 1)),
        width,
        buckets,
        draw(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=width, max_size=width)),
        draw(st.integers(-(2**62), 2**40)),
    )


facts = st.builds(
    CallFacts,
    ids,
    u64,
    st.one_of(st.none(), fps),  # None: not fingerprinted (near_duplicate off)
    st.one_of(st.none(), fps),
    st.one_of(st.none(), fps),
    st.integers(0, 10**12),
    money,
    st.integers(0, 100),
    st.booleans(),
    st.one_of(st.none(), u64),
    st.booleans(),
    values,
    st.one_of(st.none(), u64),  # the model step (None: not told)
    st.frozensets(st.integers(0, 10**6), max_size=MAX_VALUES),  # the lengths of its argument values
    u64,  # its free text (duplicate_mutation)
    st.booleans(),  # its effect names an amount
    st.lists(u32, max_size=4).map(lambda t: tuple(sorted(t))),  # what it asks about (same_answer)
)
pending = st.builds(
    Pending,
    facts,
    ids,
    ids,
    st.one_of(st.none(), st.integers(0, 100)),
    st.booleans(),
    st.booleans(),
    st.integers(0, 10**6),
    times,
)
keystats = st.builds(
    KeyStat,
    st.integers(0, 100),
    st.one_of(st.none(), hash_or_failed),
    times,
    st.booleans(),
    st.lists(times, max_size=3),
    st.booleans(),
    st.integers(0, 1000),
    times,
    st.booleans(),
)
chains = st.builds(
    Chain,
    fps,
    fps,
    st.one_of(st.none(), fps),
    st.integers(0, 100),
    hash_or_failed,
    st.booleans(),
    st.booleans(),
    st.integers(0, 1000),
    times,
)
breakers = st.builds(
    BreakerState,
    ids,
    st.sampled_from(list(BreakerStateName)),
    st.one_of(st.none(), windows(4)),
    times,
    times,
    st.lists(st.tuples(st.integers(0, 100), times).map(list), max_size=3),
    st.integers(0, 100),
    st.integers(0, 10),
    st.integers(0, 100),
    times,
)
receipts = st.fixed_dictionaries({"v": st.just(2), "kid": ids, "sig": st.text(max_size=64)})
churn_chains = st.builds(
    ChurnChain,
    u64,  # the result hash, or the failure's error hash
    st.lists(u64, max_size=4),
    st.integers(0, 1000),
    st.dictionaries(u64, st.integers(1, 100), max_size=4),  # session -> its calls in the chain
    times,
    st.booleans(),
)
# insertion-ordered sets of hashes (the oldest are evicted first): their order is part of them
ordered_hashes = st.lists(u64, max_size=5, unique=True).map(lambda hs: HashPool(4096, hs))


@st.composite
def sessions(draw) -> SessionState:
    return SessionState(
        draw(ids),
        tenant=draw(st.one_of(st.none(), ids)),
        feature=draw(st.one_of(st.none(), ids)),
        agent=draw(st.one_of(st.none(), ids)),
        created_s=draw(times),
        spend=Spend(
            draw(st.integers(0, 10**6)),
            draw(st.integers(0, 10**12)),
            draw(money),
            draw(st.dictionaries(ids, st.integers(0, 10**9), max_size=3)),
            draw(st.one_of(st.none(), windows(1))),
        ),
        halted=draw(st.one_of(st.none(), st.tuples(ids, ids))),
        escalation=draw(st.one_of(st.none(), ids)),
        loops=Loops(
            pending=draw(st.dictionaries(ids, pending, max_size=3)),
            auto_ids=draw(st.integers(0, 10**6)),
            keys=draw(st.dictionaries(u64, keystats, max_size=3)),
            epoch=draw(st.integers(0, 10**6)),
            chains=draw(st.dictionaries(ids, chains, max_size=3)),
            history=draw(st.lists(st.tuples(u64, st.one_of(st.none(), hash_or_failed)).map(list), max_size=4)),
            history_base=draw(st.integers(0, 10**6)),
            seen=dict.fromkeys(draw(st.lists(u64, max_size=4, unique=True))),
            opening=draw(st.one_of(st.none(), st.lists(u64, max_size=3))),
            answers=draw(
                st.dictionaries(
                    ids,
                    st.builds(
                        Answer,
                        hash_or_failed,
                        st.lists(u64, max_size=3),
                        st.integers(0, 1000),
                        st.lists(u32, max_size=3),
                        st.booleans(),
                        st.lists(st.lists(u32, max_size=3).map(lambda w: tuple(sorted(w))), max_size=2),
                    ),
                    max_size=2,
                )
            ),
            done=draw(
                st.dictionaries(u64, st.tuples(times, st.one_of(st.none(), u64), st.one_of(st.none(), u64), u64), max_size=3)
            ),
            said=dict.fromkeys(draw(st.lists(u64, max_size=3, unique=True))),
            wait=draw(st.dictionaries(ids, times, max_size=2)),
            warned=draw(st.dictionaries(ids, st.tuples(st.integers(1, 10), st.integers(-1, 10**6)), max_size=3)),
            answered=draw(st.integers(-1, 10**6)),
        ),
        failures=Failures(
            draw(
                st.dictionaries(
                    u64,
                    st.builds(
                        Failing,
                        st.integers(1, 100),
                        hash_or_failed,
                        st.one_of(st.none(), fps),
                        u64,
                        st.booleans(),
                        st.integers(0, 10**6),
                    ),
                    max_size=3,
                )
            ),
            draw(
                st.dictionaries(
                    ids,
                    st.builds(
                        Retried,
                        st.integers(1, 100),
                        fps,
                        st.lists(u32, max_size=4),
                        st.one_of(st.none(), fps),
                        st.lists(u64, max_size=3),
                        st.lists(u32, max_size=4),
                        st.lists(u32, max_size=4),
                    ),
                    max_size=2,
                )
            ),
            draw(st.integers(0, 10**6)),
        ),
        turns=draw(st.lists(st.tuples(u32, fps, st.booleans(), st.booleans()), max_size=3)),
        breakers={b.name: b for b in draw(st.lists(breakers, max_size=2))},
        ledger=Ledger(
            draw(st.lists(receipts, max_size=2)),
            draw(ordered_hashes),
            draw(st.dictionaries(ids, st.booleans(), max_size=3)),
            draw(ordered_hashes.map(lambda p: HashPool(1024, p))),
            draw(ordered_hashes),
        ),
        churn=draw(st.one_of(st.none(), st.builds(ChurnView, st.lists(churn_chains, max_size=MAX_CHURN_CHAINS)))),
        effects=draw(
            st.one_of(
                st.none(),
                st.builds(
                    Effects,
                    st.dictionaries(u64, st.tuples(u32, times, u64), max_size=3),
                    st.dictionaries(u64, st.tuples(u32, times, u64), max_size=3),
                ),
            )
        ),
        version=draw(st.integers(0, 10**9)),
    )


@settings(max_examples=examples(200), deadline=None)
@given(sessions())
def test_every_field_of_every_slice_survives_the_encoding(s):
    decoded = codec.decode(codec.encode(s))
    assert decoded == s
    # dicts compare equal in any order: the order of what is evicted oldest first survives too
    assert orders(decoded) == orders(s)


def orders(s: SessionState) -> list[list]:
    lp = s.loops
    ledger = s.ledger
    kept = [
        lp.pending,
        lp.keys,
        lp.chains,
        lp.seen,
        lp.answers,
        lp.done,
        lp.said,
        ledger.references,
        ledger.confirmed,
        ledger.runs,
    ]
    members = [list(c.members) for c in s.churn.chains] if s.churn is not None else []
    return [list(d) for d in kept] + members


@given(breakers)
def test_a_breaker_has_one_encoding_and_it_round_trips(b):
    assert BreakerState.from_wire(b.name, b.to_wire()) == b


def test_a_value_of_another_format_reads_as_absent():
    assert codec.decode(b"[2,5,[]]") is None
    assert codec.decode(b'{"not": "a session"}') is None


def test_a_session_stored_before_the_newer_detectors_reads_with_their_state_empty():
    """Loops written by an earlier version (no same_answer, duplicate, user-turn or Retry-After
    state; streaks without `since`) read back; a stored streak began no later than its last run,
    so a slow-poll budget is not spent at once."""
    wire = Loops(keys={7: KeyStat(runs=6, last_result=1, last_ts=1_700_000_050.0, polling=True)}).to_wire()
    for name in ("answers", "done", "said", "wait"):
        del wire[name]
    wire["keys"] = [k[:8] for k in wire["keys"]]
    loops = Loops.from_wire(wire)
    assert (loops.answers, loops.done, loops.said, loops.wait) == ({}, {}, {}, {})
    assert loops.keys[7].since == 1_700_000_050.0


def test_a_session_stored_before_warnings_error_streaks_and_model_steps_reads_with_their_state_empty():
    """Loops, calls, ledgers and tool views written by the version before the graduated answer
    (failure streaks of three fields, successes without their model step and effect, calls without
    argument values, step or start time, no warnings, no confirmations or digit runs, per-agent
    views) read back; so do calls of the versions before duplicate_mutation (nine fields) and
    before writes (ten)."""
    facts = CallFacts("t", 1, None, None, None, 0, 0.0, 0, True, 9, False, (6,), 7, frozenset({3}))
    loops = Loops(
        pending={"c1": Pending(facts, "c1", "b", None, False, False, 0, 12.5)},
        done={9: (100.0, 7, 8)},
        warned={"identical_failure": (1, 4)},
    )
    wire = loops.to_wire()
    assert Loops.from_wire(wire).warned == {"identical_failure": (1, 4)}
    # a warning stored as a bare count (before warnings waited for evidence): read as from no call
    assert Loops.from_wire({**wire, "warned": {"identical_failure": 1}}).warned == {"identical_failure": (1, -1)}
    wire["fail"] = [1, 2, False]  # a failure streak of its time: read as none (the streak starts over)
    wire["done"] = [d[:2] for d in wire["done"]]
    wire["pending"] = {cid: [p[0][:11], *p[1:7]] for cid, p in wire["pending"].items()}
    del wire["warned"]
    old = Loops.from_wire(wire)
    assert Failures.from_wire(None) == Failures()  # sessions stored before failures had their own slice
    assert old.done == {9: (100.0, None, None, 0)} and old.warned == {}
    p = old.pending["c1"]
    assert (p.facts.values, p.facts.turn, p.facts.sizes, p.facts.effect, p.ts) == ((), None, frozenset(), 9, 0.0)
    for n, (effect, writes) in ((9, (None, False)), (10, (9, False))):
        wire["pending"] = {"c1": [loops.to_wire()["pending"]["c1"][0][:n], "c1", "b", None, False, False, 0]}
        f = Loops.from_wire(wire).pending["c1"].facts
        assert (f.effect, f.writes) == (effect, writes)
    ledger = Ledger.from_wire(Ledger([], HashPool(9, [1, 2]), {"t": True}, HashPool(9, [3]), HashPool(9, [4])).to_wire()[:3])
    assert (list(ledger.references), list(ledger.confirmed), list(ledger.runs)) == ([1, 2], [], [])
    assert ChurnView.from_wire([7, -1, 3, 2, "s9", 100.0]) == ChurnView()  # an agent view: dropped
