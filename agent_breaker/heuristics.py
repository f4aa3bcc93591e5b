"""The stable machine name of every guard. Verdicts, incidents, metrics, config keys and the
README all use these strings; renaming one is a breaking change."""

from __future__ import annotations

CIRCUIT_OPEN = "circuit_open"
CIRCUIT_HALF_OPEN = "circuit_half_open"

IDENTICAL_FAILURE = "identical_failure"
IDENTICAL_CALL = "identical_call"
STUCK_POLLING = "stuck_polling"
NEAR_DUPLICATE = "near_duplicate"
OSCILLATION = "oscillation"
SAME_ANSWER = "same_answer"
DUPLICATE_MUTATION = "duplicate_mutation"
EARLY_RETRY = "early_retry"
SEMANTIC_ECHO = "semantic_echo"
AGENT_DEADLOCK = "agent_deadlock"
SESSION_CHURN = "session_churn"

TOKEN_BUDGET = "token_budget"
COST_BUDGET = "cost_budget"
BUDGET_SOFT_LIMIT = "budget_soft_limit"
TOOL_TOKEN_BUDGET = "tool_token_budget"
TOKEN_VELOCITY = "token_velocity"
STEP_LIMIT = "step_limit"
DEPTH_LIMIT = "depth_limit"

UNVERIFIED_CLAIM = "unverified_claim"
#: a coding agent's last message claims work (tests pass, a build, a commit, a push, a file
#: changed, a command run) that its session's tool outcomes contradict or never show
DONE_CLAIM = "done_claim"
#: arguments (before the call) or a result (after it) that break the tool's schema or model
SCHEMA_VIOLATION = "schema_violation"
#: a tool whose results met its schema starts returning another shape
SCHEMA_DRIFT = "schema_drift"
EMPTY_MUTATION_RESULT = "empty_mutation_result"

GLOBAL_BUDGET = "global_budget"

INVALID_EVENT = "invalid_event"
STORAGE_UNAVAILABLE = "storage_unavailable"
#: a stored session or breaker that cannot be read: that key is refused until it is reset
CORRUPT_STATE = "corrupt_state"
#: a guard flow's action failed (NeMo handed it None): the flow refuses, fail closed
GUARD_ERROR = "guard_error"

#: every heuristic whose mode can be set in config (`modes:`)
CONFIGURABLE: tuple[str, ...] = (
    CIRCUIT_OPEN,
    IDENTICAL_FAILURE,
    IDENTICAL_CALL,
    STUCK_POLLING,
    NEAR_DUPLICATE,
    OSCILLATION,
    SAME_ANSWER,
    DUPLICATE_MUTATION,
    EARLY_RETRY,
    SEMANTIC_ECHO,
    AGENT_DEADLOCK,
    SESSION_CHURN,
    TOKEN_BUDGET,
    COST_BUDGET,
    BUDGET_SOFT_LIMIT,
    TOOL_TOKEN_BUDGET,
    TOKEN_VELOCITY,
    STEP_LIMIT,
    DEPTH_LIMIT,
    UNVERIFIED_CLAIM,
    DONE_CLAIM,
    EMPTY_MUTATION_RESULT,
    GLOBAL_BUDGET,
    SCHEMA_VIOLATION,
    SCHEMA_DRIFT,
)

#: the loop heuristics: their halts end when the user says something new
LOOPS: frozenset[str] = frozenset(
    {
        IDENTICAL_FAILURE,
        IDENTICAL_CALL,
        STUCK_POLLING,
        NEAR_DUPLICATE,
        OSCILLATION,
        SAME_ANSWER,
        SEMANTIC_ECHO,
        AGENT_DEADLOCK,
    }
)

#: heuristics that can be wrong: they warn first (the call runs, the agent is told), and cut when
#: the pattern goes on after the warning (`warn_first:` in config). Deterministic checks (budgets,
#: ceilings, breakers, receipts, schemas) are not among them: they cut at once; nor is
#: session_churn, whose pattern spans sessions (a warning given in each new one would never end).
GRADUATED: frozenset[str] = LOOPS | {DUPLICATE_MUTATION}

#: the session budgets: their halts stay until the budget is reset (an operator's resume)
BUDGETS: frozenset[str] = frozenset({TOKEN_BUDGET, COST_BUDGET, STEP_LIMIT})
#: trips that end the session: every later call of it is refused (enforce mode)
SESSION_TERMINAL: frozenset[str] = LOOPS | BUDGETS

#: a session frozen for a human (the escalation queue): its calls wait for their decision
ESCALATED = "escalated"
#: trips that hand the session to a human when they block (the escalation queue)
ESCALATING: frozenset[str] = SESSION_TERMINAL | {UNVERIFIED_CLAIM}
