# NeMo calls init(app): it validates custom_data.agent_breaker and registers the actions.
from agent_breaker.actions import init  # noqa: F401
