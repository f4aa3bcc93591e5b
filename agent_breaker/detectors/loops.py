"""Loop detectors over a session's tool-call trajectory.

Each `check_*` runs before a call and returns a Trip or None; `record_result` updates the
trajectory when a result comes back. Progress is the key: a repeated call whose result
changes is work, not a loop, so every streak restarts when a result is new.
"""

from __future__ import annotations

from typing import NamedTuple

from .._outcomes import Outcome
from .._state import (
    FAILED,
    MAX_ANSWER_KEYS,
    MAX_ASKED,
    MAX_CHAINS,
    MAX_KEYS,
    MAX_SEEN,
    MAX_TOPIC_WORDS,
    MAX_VALUES,
    Answer,
    CallFacts,
    Chain,
    KeyStat,
    Pending,
    SessionState,
    put_bounded,
)
from ..config import AgentBreakerConfig
from ..heuristics import (
    DUPLICATE_MUTATION,
    EARLY_RETRY,
    IDENTICAL_CALL,
    NEAR_DUPLICATE,
    OSCILLATION,
    SAME_ANSWER,
    STUCK_POLLING,
)
from ..verdicts import Trip
from . import failures
from .base import similarity


def check_identical_call(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig, now: float, polling: bool) -> Trip | None:
    st = s.loops.keys.get(f.key)
    c = cfg.identical_call
    if st is None or polling or st.epoch != s.loops.epoch or now - st.last_ts > c.window_s:
        return None
    limit = c.max_silent_repeats if st.silent else failures.failure_limit(cfg, c.max_repeats, st.transient)
    if st.runs < limit:
        return None
    return Trip(
        IDENTICAL_CALL,
        "session",
        f"{f.tool} was called {st.runs} times with the same arguments and no new result",
        "You already have this result. Use it, or change your approach instead of repeating the call.",
        {"repeats": st.runs, "max_repeats": limit, "window_s": c.window_s},
    )


def check_stuck_polling(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig, now: float, polling: bool) -> Trip | None:
    st = s.loops.keys.get(f.key)
    if st is None or not polling or not st.poll_ts or st.epoch != s.loops.epoch:
        return None
    c = cfg.stuck_polling
    waited = now - st.since
    if c.max_wait_s is not None and waited >= c.max_wait_s and st.runs >= c.min_slow_polls:
        # slow polls: too few to fill the window, but nothing has changed for too long
        return Trip(
            STUCK_POLLING,
            "session",
            f"{f.tool} was polled {st.runs} times over {waited:.0f}s and its result never changed",
            "The job is not moving. Stop polling; report its current state, or escalate to a human.",
            {"polls": st.runs, "waited_s": round(waited, 3), "max_wait_s": c.max_wait_s},
        )
    horizon = now - c.window_s
    if st.poll_ts[0] < horizon:
        st.poll_ts = [t for t in st.poll_ts if t >= horizon]
    if len(st.poll_ts) < c.max_polls:
        return None
    return Trip(
        STUCK_POLLING,
        "session",
        f"{f.tool} was polled {len(st.poll_ts)} times in {c.window_s:g}s and its result never changed",
        "The job is not moving. Stop polling; report its current state, or escalate to a human.",
        {"polls": len(st.poll_ts), "max_polls": c.max_polls, "window_s": c.window_s},
    )


def polled_by_result(s: SessionState, f: CallFacts) -> bool:
    """This exact call once returned an in-progress result: it is a poll."""
    st = s.loops.keys.get(f.key)
    return st is not None and st.polling


class Similarity(NamedTuple):
    """How a call compares to its tool's current no-progress chain: similar as text, similar
    with ids and numbers aside, and the scores that decided (for the incident's evidence)."""

    text: bool
    shape: bool
    score: float | None = None
    thought: float | None = None


NOT_SIMILAR = Similarity(False, False)


def chain_similarity(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig, now: float) -> Similarity:
    """Is this call similar to its tool's current no-progress chain."""
    chain = s.loops.chains.get(f.tool)
    if chain is None or chain.epoch != s.loops.epoch or now - chain.last_ts > cfg.near_duplicate.window_s:
        return NOT_SIMILAR
    if f.fp_text is None or f.fp_shape is None:
        return NOT_SIMILAR  # not fingerprinted: near_duplicate and identical_failure are off
    c = cfg.near_duplicate
    thought = None
    if chain.fp_thought is not None and f.fp_thought is not None:
        thought = similarity(f.fp_thought, chain.fp_thought)
        if thought < c.thought_similarity:
            return Similarity(False, False, None, thought)
    if chain.failed:
        score = similarity(f.fp_shape, chain.fp_shape)
        return Similarity(False, score >= c.args_similarity, score, thought)
    # a success chain takes lexical variants only (case, whitespace, punctuation): similar
    # writes that each succeed (an e-mail to each recipient) are work, even with equal results
    same = f.fp_text == chain.fp_text
    return Similarity(same, False, 1.0 if same else None, thought)


def check_near_duplicate(
    s: SessionState, f: CallFacts, cfg: AgentBreakerConfig, similar: Similarity, polling: bool
) -> Trip | None:
    chain = s.loops.chains.get(f.tool)
    c = cfg.near_duplicate
    if chain is None or not (similar.shape if chain.failed else similar.text):
        return None
    if chain.length < failures.failure_limit(cfg, c.max_repeats, chain.failed and chain.transient):
        return None
    if polling and not chain.failed:
        return None  # an unchanged poll is stuck_polling's call
    what = "failed the same way" if chain.failed else "returned the same result"
    return Trip(
        NEAR_DUPLICATE,
        "session",
        f"{chain.length} near-identical calls to {f.tool} in a row {what}",
        "Rewording the same call will not change the outcome. Fix the cause (a wrong table, id or parameter) "
        "or report what you found.",
        {"repeats": chain.length, "max_repeats": c.max_repeats, "args_similarity": c.args_similarity}
        | _scores(similar, c.thought_similarity),
    )


def _scores(similar: Similarity, thought_threshold: float) -> dict[str, float]:
    """The similarity scores that decided, rounded (evidence in verdicts and incidents)."""
    out = {}
    if similar.score is not None:
        out["similarity"] = round(similar.score, 3)
    if similar.thought is not None:
        out["thought_similarity"] = round(similar.thought, 3)
        out["thought_threshold"] = thought_threshold
    return out


def check_same_answer(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig, polling: bool) -> Trip | None:
    a = s.loops.answers.get(f.tool)
    limit = cfg.same_answer.max_calls
    # stale once another call taught the agent something: it has moved on; and a call about
    # something else (another name screened, another record looked up) is no retry of the streak
    if a is None or polling or f.mutating or f.writes or len(a.keys) < limit or a.epoch != s.loops.epoch:
        return None
    if not asks_the_same(a, f):
        return None
    return Trip(
        SAME_ANSWER,
        "session",
        f"{len(a.keys)} calls to {f.tool} with different arguments in a row all returned the same result",
        "Changing the arguments is not changing the answer. Use what you have, or report that the information is not available.",
        {"calls": len(a.keys), "max_calls": limit},
    )


#: two calls whose arguments' words are this alike ask one thing in other words (LIMIT 10, LIMIT 20)
SAME_QUESTION = 0.8


def asks_the_same(a: Answer, f: CallFacts) -> bool:
    """Does the call ask again what the streak's calls asked (the first call of a streak always
    does): it shares a word of its argument values with them, and either their answer is that
    nothing was found (reworded searches, paging past the end) or its arguments read like the
    last one's (a growing LIMIT). Lookups of other things that get one short answer each (ten
    users "active", ten links "200 OK", ten names "no match") ask other things."""
    if not a.keys:
        return True
    if not f.topic or set(a.topic).isdisjoint(f.topic):
        return False
    words = _words(f)
    return a.nothing or (bool(words) and any(similarity(words, asked) >= SAME_QUESTION for asked in a.asked))


def _words(f: CallFacts) -> tuple[int, ...]:
    return tuple(sorted(f.fp_text)[:MAX_TOPIC_WORDS]) if f.fp_text else ()


def check_duplicate_mutation(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig, now: float) -> Trip | None:
    """The same action (its effect: _effects, in any spelling) while it is in flight, or again
    after it succeeded within `window_s`: refused; with other free text only, a warning."""
    if f.effect is None:
        return None
    for p in s.loops.pending.values():
        if p.facts.effect == f.effect and now - p.ts <= cfg.duplicate_mutation.in_flight_s:
            # parallel tool calls of one model turn: the first has not even answered yet
            return duplicate_in_flight(f, now - p.ts, other_text=p.facts.effect_text != f.effect_text, where=p.call_id)
    done = s.loops.done.get(f.effect)
    if done is None or now - done[0] > cfg.duplicate_mutation.window_s:
        return None
    ts, turn, _, text = done
    if f.turn is not None and f.turn == turn:
        # asked for by the model step that asked for the first: it never saw that one's result
        return Trip(
            DUPLICATE_MUTATION,
            "call",
            f"{f.tool} with these arguments already ran in this same model step; running it again would do it twice",
            "This action already happened: do not repeat it. Use the earlier result.",
            {"same_turn": 1, "since_s": round(now - ts, 3)},
            certain=True,
        )
    return duplicate_done(f, now - ts, cfg, other_text=text != f.effect_text)


def duplicate_in_flight(f: CallFacts, since_s: float, *, other_text: bool, where: str) -> Trip:
    """The action of a call still in flight (`where`: its call id, or another session)."""
    if other_text:
        return Trip(
            DUPLICATE_MUTATION,
            "call",
            f"{f.tool} is already doing this ({where}), only its free text differs; running it again may do it twice",
            "This action is already under way with other wording: wait for its result; if a second one is meant, "
            "say so to the user.",
            {"in_flight": 1, "since_s": round(since_s, 3), "other_text": 1},
        )
    return Trip(
        DUPLICATE_MUTATION,
        "call",
        f"{f.tool} is already doing this ({where}); running it again would do it twice",
        "This action is already under way: wait for its result instead of sending it again.",
        {"in_flight": 1, "since_s": round(since_s, 3)},
        certain=True,
    )


def duplicate_done(f: CallFacts, since_s: float, cfg: AgentBreakerConfig, *, other_text: bool, where: str = "") -> Trip:
    """The action of a call that succeeded `since_s` ago (`where`: " in another session")."""
    window = cfg.duplicate_mutation.window_s
    if other_text:
        return Trip(
            DUPLICATE_MUTATION,
            "call",
            f"{f.tool} already did this {since_s:.0f}s ago{where}, only its free text differs; it may be done twice",
            "This action already happened with other wording: if a second one is meant, make sure the user wants it.",
            {"since_s": round(since_s, 3), "window_s": window, "other_text": 1},
        )
    # an amount moved again (a second payment, refund, order) is refused at once; another action
    # done again may be new work (the next song, the next item): warned first, and judged by
    # what its result did (the same effect again is no progress)
    return Trip(
        DUPLICATE_MUTATION,
        "call",
        f"{f.tool} already succeeded with these arguments {since_s:.0f}s ago{where}; running it again would repeat the action",
        "This action already happened: do not repeat it. Use the earlier result; if it must happen again, ask the "
        "user to confirm.",
        {"since_s": round(since_s, 3), "window_s": window},
        certain=f.moves_amount,
    )


def check_early_retry(s: SessionState, f: CallFacts, now: float) -> Trip | None:
    until = s.loops.wait.get(f.tool)
    if until is None or now >= until:
        return None
    return Trip(
        EARLY_RETRY,
        "call",
        f"{f.tool} asked for no call before {until - now:.0f}s from now (Retry-After)",
        "The service is rate limiting or recovering: wait retry_after_s seconds before calling it again, or do "
        "something else meanwhile.",
        {"wait_s": round(until - now, 3)},
        retry_after_s=until - now,
    )


def check_oscillation(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig) -> Trip | None:
    c = cfg.oscillation
    history = s.loops.history
    # a cycle of period p needs this call p places back (history[-p], p = 2..max_period): most
    # calls fail this at once
    for h in history[-c.max_period : -1]:
        if h[0] == f.key:
            break
    else:
        return None
    for period in range(2, c.max_period + 1):
        span = c.min_cycles * period
        if len(history) < span - 1:
            break
        window = history[len(history) - span + 1 :]
        keys = [h[0] for h in window]
        keys.append(f.key)
        if len(set(keys[:period])) < 2:
            continue
        if any(keys[i] != keys[i + period] for i in range(span - period)):
            continue
        # a call that returns something else the next time it comes round is work: the calls
        # between changed the world (edit, test, undo the edit, test is a bisection)
        results: dict[int, int] = {}
        compared = False
        progress = False
        for key, result in window:
            if result is None:
                continue
            if key not in results:
                results[key] = result
            elif results[key] != result:
                progress = True
                break
            else:
                compared = True
        if progress or not compared:
            continue
        return Trip(
            OSCILLATION,
            "session",
            f"the last {span} calls repeat a cycle of {period} calls with the same results",
            "You are going around in a circle. Step back: summarize what the repeated calls told you and "
            "decide on a different next step.",
            {"period": period, "cycles": c.min_cycles},
        )
    return None


def record_call(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig) -> int:
    """A call was let through: append it to the trajectory; returns its history index."""
    history = s.loops.history
    history.append([f.key, None])
    cap = cfg.oscillation.max_period * cfg.oscillation.min_cycles
    if len(history) > cap:
        drop = len(history) - cap
        del history[:drop]
        s.loops.history_base += drop
    return s.loops.history_base + len(history) - 1


class Heard(NamedTuple):
    """What one result says, reduced to hashes: `repeat` compares it with earlier runs of its
    call (timings and identities masked), `answer` with the tool's answers to other calls
    (timings and the call's own echoed arguments masked), `failure` (a failed result: its
    error and payload, masked as `repeat`) with the tool's earlier failures; `tool` keys the
    tool's answers."""

    repeat: int
    answer: int
    tool: int
    failure: int | None = None
    failure_shape: tuple[int, ...] | None = None  # a failure's words, sorted, digits folded (ids aside)
    failure_words: tuple[int, ...] | None = None  # a failure's words, sorted (ids aside)
    failure_counts: int = 0  # what a failure counted ("5 failed"; a hash, 0 for none)
    failure_values: tuple[int, ...] = ()  # the values a failure named, hashed as argument values are
    ack: bool = False  # only says the call went through
    effect: int | None = None  # a mutating call's success: what it did (ids, timings and numbers aside)
    news: int = 0  # the tool's answer as news is judged: `repeat` with echoes masked too (ids aside)
    nothing: bool = False  # the answer is that nothing was found (an empty list, "no results")


def record_result(
    s: SessionState,
    p: Pending,
    heard: Heard,
    out: Outcome,
    blank: bool,
    polling: bool,
    now: float,
    cfg: AgentBreakerConfig,
) -> bool:
    """Update every streak with one result. Returns True when the result is progress: a
    success that is news, one this call had not returned before and that its tool had given to
    no call (ids, handles and echoes aside: a fresh search id, a fresh salt in the arguments or
    a fresh element ref does not make an old answer new), or a new write that did not do again
    what it did before. Progress restarts the streaks of every other call (the `epoch` stamps),
    so work between repeats is not a loop; a success that is no news neither ends them."""
    f = p.facts
    failed, transient = out.failed, out.dependency
    result_hash = heard.repeat
    # a failure is its error: the same call failing another way is news of a kind (5 failed, then
    # 4); a dependency's failures are all one (a timeout, then a 503, is the same outage)
    if failed:
        outcome = FAILED if transient or heard.failure is None else heard.failure
    else:
        outcome = result_hash
    progress = False
    if not failed:
        pair = (f.key * 1_000_003 + result_hash) & 0xFFFF_FFFF_FFFF_FFFF
        told = (heard.tool * 1_000_033 + heard.news) & 0xFFFF_FFFF_FFFF_FFFF
        new_pair, new_answer = pair not in s.loops.seen, told not in s.loops.seen
        # a write's acknowledgement says nothing new, but the write changed the world; an action
        # done again with the same effect (a second transfer, its id and the balance aside) did not
        done = s.loops.done.get(f.effect) if f.effect is not None else None
        again = done is not None and heard.effect is not None and done[2] == heard.effect
        progress = new_pair and (new_answer or f.writes or f.mutating) and not again
        for h in (pair, told):
            s.loops.seen[h] = None
        while len(s.loops.seen) > MAX_SEEN:
            del s.loops.seen[next(iter(s.loops.seen))]

    # identical_failure: the call's own streak, whatever other calls did (failures.py); the
    # same call failing otherwise than it last did (the tests run after an edit: 5 failed, then
    # 4) is news too: only the world changes a call's error, the arguments being the same
    changed = failures.record(
        s,
        f,
        cfg,
        failed=failed,
        transient=transient,
        out=outcome,
        words=heard.failure_words,
        shape=heard.failure_shape,
        told=heard.failure_values,
        counts=heard.failure_counts,
    )
    progress = progress or changed
    if progress and not failed and (f.writes or f.mutating):
        failures.world_changed(s)

    # identical_call / stuck_polling: per distinct call
    st = s.loops.keys.pop(f.key, None)
    if st is None:
        st = KeyStat()
        while len(s.loops.keys) >= MAX_KEYS:
            del s.loops.keys[next(iter(s.loops.keys))]
    # a poll's streak survives longer gaps: slow polls are judged by stuck_polling.max_wait_s
    gap = cfg.identical_call.window_s
    if st.polling or out.in_progress:
        gap = max(gap, cfg.stuck_polling.max_wait_s or 0.0)
    fresh = st.last_result is None or st.epoch != s.loops.epoch or now - st.last_ts > gap
    unchanged = not fresh and outcome == st.last_result
    st.runs = st.runs + 1 if unchanged else 1
    if st.runs == 1:
        st.since = now
    st.transient = failed and transient
    st.silent = not failed and blank
    st.polling = st.polling or out.in_progress
    if unchanged:
        st.poll_ts.append(now)
        if len(st.poll_ts) > cfg.stuck_polling.max_polls:
            del st.poll_ts[0]
    else:
        st.poll_ts = [now]
    st.last_result = outcome
    st.last_ts = now

    # near_duplicate: the tool's chain of similar calls without progress (`chain` is left None
    # when this call is not in it, so that progress ends it as it ends every other chain)
    chain = s.loops.chains.get(f.tool)
    if f.fp_text is None or f.fp_shape is None:
        chain = None  # not fingerprinted (its readers are off where it was made): a call it does not see
    elif not failed and chain is not None and (blank or (unchanged and not chain.variant)):
        # a blank success, or the same call again with the same result, neither extends nor
        # ends a chain: re-running a call is identical_call's to judge, not "other words" (once
        # the chain holds other wordings, a rerun of one of them is one more of them)
        chain = None
    elif (
        chain is not None
        and not changed
        and chain.epoch == s.loops.epoch
        and ((failed and chain.failed and p.similar_shape) or (not failed and not chain.failed and p.similar_text))
        and (failed or outcome == chain.last_result)
    ):
        chain.length += 1
        chain.fp_text, chain.fp_shape, chain.fp_thought = f.fp_text, f.fp_shape, f.fp_thought
        chain.transient = failed and transient
        chain.last_ts = now
        chain.variant = chain.variant or f.key != chain.last_key
        chain.last_key = f.key
    else:
        chain = Chain(f.fp_text, f.fp_shape, f.fp_thought, 1, outcome, failed, failed and transient, s.loops.epoch, now, f.key)
        put_bounded(s.loops.chains, f.tool, chain, MAX_CHAINS)

    # same_answer: the tool's calls with other arguments and this one answer, while nothing
    # else was learned; a blank answer (a command that prints nothing), a failure, or an
    # acknowledgement ("OK.", "File created successfully" to a write) does not count
    # acknowledgement ("OK.", "File created successfully" to a write) does not count; nor does a
    # call about something else than the streak's (a sweep over names, each "no match": work)
    answer = None
    if not (failed or blank or polling or out.in_progress or f.mutating or f.writes or heard.ack):
        answer = s.loops.answers.get(f.tool)
        if answer is None or answer.result != heard.answer or answer.epoch != s.loops.epoch:
            answer = Answer(heard.answer, [], 0, nothing=heard.nothing)
            put_bounded(s.loops.answers, f.tool, answer, MAX_CHAINS)
        if f.key not in answer.keys and len(answer.keys) < MAX_ANSWER_KEYS and asks_the_same(answer, f):
            answer.keys.append(f.key)
            answer.topic = sorted(set(answer.topic).union(f.topic))[:MAX_VALUES]
        if f.topic and not set(answer.topic).isdisjoint(f.topic):
            # what it asked, for a next call that asks it again (one of a cycle of questions)
            answer.asked = [*answer.asked, _words(f)][-MAX_ASKED:]

    # early_retry: the tool said when to come back; a success means it is back
    if out.retry_after_s is not None:
        put_bounded(s.loops.wait, f.tool, now + out.retry_after_s, MAX_CHAINS)
    elif not failed:
        s.loops.wait.pop(f.tool, None)

    # duplicate_mutation: the action is done
    if f.effect is not None and not failed:
        put_bounded(s.loops.done, f.effect, (now, f.turn, heard.effect, f.effect_text), MAX_KEYS)

    # oscillation: fill in the result of this call's place in the trajectory
    i = p.history_index - s.loops.history_base
    if 0 <= i < len(s.loops.history):
        s.loops.history[i][1] = outcome

    if progress:
        s.loops.epoch += 1
        # a new stretch: graduated heuristics warn again first, but for the patterns followed
        # on their own (`heuristic:pattern`), whose own progress gives their warning back
        s.loops.warned = {k: n for k, n in s.loops.warned.items() if ":" in k}
        if chain is not None:
            chain.epoch = s.loops.epoch
    if answer is not None:
        answer.epoch = s.loops.epoch  # its own new calls are no news to the streak
    st.epoch = s.loops.epoch
    s.loops.keys[f.key] = st
    return progress
