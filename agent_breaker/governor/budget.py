"""The budget governor: spend accounting and the ceilings checked before each step.

Spend is counted when a step arrives (the model call that produced it has been paid for,
whatever we decide). The ceilings are checked against the projected spend: what has been spent,
plus one more step of the session's average size, since letting a call run means at least one
more model call to read its result.
"""

from __future__ import annotations

from .._state import MAX_TOOLS, SessionState, put_bounded
from .._windows import BucketWindow
from ..config import AgentBreakerConfig
from ..heuristics import (
    BUDGET_SOFT_LIMIT,
    COST_BUDGET,
    DEPTH_LIMIT,
    GLOBAL_BUDGET,
    STEP_LIMIT,
    TOKEN_BUDGET,
    TOKEN_VELOCITY,
    TOOL_TOKEN_BUDGET,
)
from ..verdicts import Trip

_FINISH = "Stop calling tools and write your final answer from what you already have."


def step_cost_usd(
    cfg: AgentBreakerConfig, input_tokens: int, output_tokens: int, cost_usd: float | None, model: str | None
) -> float:
    if cost_usd is not None:
        return cost_usd
    price = cfg.budget.prices.get(model or cfg.budget.default_model or "")
    if price is None:
        return 0.0
    return (input_tokens * price.input_per_mtok_usd + output_tokens * price.output_per_mtok_usd) / 1e6


def account(s: SessionState, cfg: AgentBreakerConfig, now: float, tokens: int, cost_usd: float, tool: str | None) -> None:
    s.spend.steps += 1
    s.spend.tokens += tokens
    s.spend.cost_usd += cost_usd
    if tool is not None and tokens:
        put_bounded(s.spend.tool_tokens, tool, s.spend.tool_tokens.get(tool, 0) + tokens, MAX_TOOLS)
    v = cfg.token_velocity
    if s.spend.velocity is None or s.spend.velocity.window_s != v.window_s:
        s.spend.velocity = BucketWindow(v.window_s, min(1.0, v.window_s / 10), 1)
    s.spend.velocity.add(now, float(tokens))


def _projected(spent: float, s: SessionState) -> float:
    return spent + spent / s.spend.steps if s.spend.steps else spent


def check_step_limit(s: SessionState, cfg: AgentBreakerConfig) -> Trip | None:
    limit = cfg.step_limit.max_steps
    if s.spend.steps <= limit:
        return None
    return Trip(
        STEP_LIMIT,
        "session",
        f"step {s.spend.steps} is over the ceiling of {limit} steps",
        _FINISH,
        {"steps": s.spend.steps, "max_steps": limit},
    )


def check_depth_limit(depth: int, cfg: AgentBreakerConfig) -> Trip | None:
    limit = cfg.depth_limit.max_depth
    if depth <= limit:
        return None
    return Trip(
        DEPTH_LIMIT,
        "call",
        f"agent nesting depth {depth} is over the ceiling of {limit}",
        "Do not delegate further. Do the work at this level, or return what you have to your parent agent.",
        {"depth": depth, "max_depth": limit},
    )


def _over(heuristic: str, s: SessionState, spent: float, limit: float | None, unit: str, digits: int | None) -> Trip | None:
    """A session ceiling: trips when the projected spend passes the limit (None: off).
    `unit` names it in counters ("tokens", "cost_usd"); `digits` rounds them (None: whole)."""
    if limit is None:
        return None
    projected = _projected(spent, s)
    if projected <= limit:
        return None
    show = "{:,.0f} tokens" if unit == "tokens" else "${:.2f}"
    return Trip(
        heuristic,
        "session",
        f"projected spend of {show.format(projected)} is over the session budget of {show.format(limit)}",
        _FINISH,
        {unit: round(spent, digits), f"projected_{unit}": round(projected, digits), f"max_{unit}": limit},
    )


def check_token_budget(s: SessionState, cfg: AgentBreakerConfig) -> Trip | None:
    return _over(TOKEN_BUDGET, s, s.spend.tokens, cfg.budget.max_tokens, "tokens", None)


def check_cost_budget(s: SessionState, cfg: AgentBreakerConfig) -> Trip | None:
    return _over(COST_BUDGET, s, s.spend.cost_usd, cfg.budget.max_cost_usd, "cost_usd", 6)


def check_soft_limit(s: SessionState, cfg: AgentBreakerConfig, tool: str, mutating: bool) -> Trip | None:
    b = cfg.budget
    if cfg.tool(tool).read_only or (b.soft_limit_blocks == "mutating" and not mutating):
        return None
    share = b.soft_limit_pct / 100.0
    used = 0.0
    if b.max_tokens is not None:
        used = _projected(s.spend.tokens, s) / b.max_tokens
    if b.max_cost_usd is not None:
        used = max(used, _projected(s.spend.cost_usd, s) / b.max_cost_usd)
    if used <= share:
        return None
    return Trip(
        BUDGET_SOFT_LIMIT,
        "call",
        f"the session has used {used:.0%} of its budget; past {b.soft_limit_pct:g}% "
        + ("no tool that acts runs" if b.soft_limit_blocks == "mutating" else "only read-only tools run"),
        "Budget is nearly spent: take no further action; use read-only tools only, then write your final answer.",
        {"budget_used_pct": round(used * 100, 1), "soft_limit_pct": b.soft_limit_pct},
    )


def check_tool_token_budget(s: SessionState, cfg: AgentBreakerConfig, tool: str) -> Trip | None:
    limit = cfg.tool(tool).max_tokens
    if limit is None:
        return None
    used = s.spend.tool_tokens.get(tool, 0)
    if used <= limit:
        return None
    return Trip(
        TOOL_TOKEN_BUDGET,
        "tool",
        f"steps calling {tool} have used {used:,} tokens, over its allocation of {limit:,}",
        f"Stop using {tool} in this session; use other tools or write your final answer.",
        {"tool_tokens": used, "max_tokens": limit},
    )


def check_velocity(s: SessionState, cfg: AgentBreakerConfig, now: float) -> Trip | None:
    v = cfg.token_velocity
    if s.spend.velocity is None:
        return None
    rate = s.spend.velocity.read(now)[0] / v.window_s
    if rate <= v.max_tokens_per_s:
        return None
    return Trip(
        TOKEN_VELOCITY,
        "call",
        f"{rate:,.0f} tokens/s over the last {v.window_s:g}s is over the ceiling of {v.max_tokens_per_s:,.0f}",
        "You are spending tokens too fast. Slow down: do fewer, smaller steps.",
        {"tokens_per_s": round(rate), "max_tokens_per_s": v.max_tokens_per_s, "window_s": v.window_s},
        retry_after_s=v.window_s,
    )


def check_global_budget(
    spent: tuple[float, float], max_tokens: float | None, max_cost_usd: float | None, window_s: float, now: float, whose: str
) -> Trip | None:
    """A shared window's spend across all workers (`whose`: "tenant and feature", or "tenant"
    for all its features together) against its ceilings."""
    tokens, cost = spent
    over = (max_tokens is not None and tokens > max_tokens) or (max_cost_usd is not None and cost > max_cost_usd)
    if not over:
        return None
    reset_in = window_s - (now % window_s)
    return Trip(
        GLOBAL_BUDGET,
        "call",
        f"the {whose} spend in this {window_s:g}s window ({tokens:,.0f} tokens, ${cost:.2f}) is over its ceiling",
        f"The shared budget for this {whose} is spent. Stop and report what you have.",
        {"tokens": round(tokens), "cost_usd": round(cost, 6), "max_tokens": max_tokens, "max_cost_usd": max_cost_usd},
        retry_after_s=reset_in,
    )
