"""The Colang flows of agent-breaker (package data: *.co)."""
