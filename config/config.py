# `nemoguardrails server --config <this folder>` calls init(app) once at start: every config here
# is checked for what it needs (a receipt key...), and a missing one stops the server in one line.
from agent_breaker.actions import init_root as init  # noqa: F401
