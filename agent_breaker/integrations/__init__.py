"""Drop-ins for the agent stacks people run, each built on `agent_breaker.guarded` so the same
decisions hold everywhere. Each module needs its extra: `agent_breaker.integrations.litellm`
(`[litellm]`), `.langgraph` (`[langgraph]`), `.openai_agents` (`[openai-agents]`)."""
