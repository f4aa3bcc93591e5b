"""The package's exception root, and the errors raised before any heavy module is needed (the CLI
catches them without importing pydantic).

Every exception agent-breaker raises is an `AgentBreakerError`, so one `except
agent_breaker.AgentBreakerError` catches them all; each keeps the standard base it always had,
so code catching `ValueError` or `LookupError` goes on working::

    AgentBreakerError
    ├── ConfigError (ValueError): a bad configuration value
    │   └── MissingExtra (ImportError too): an optional dependency is not installed
    ├── InvalidEventError (ValueError): an event that cannot be decided
    ├── CanonicalError (ValueError): arguments or a result too big or too deep to canonicalize
    ├── SchemaError (ValueError): a tool's schema that does not compile
    ├── IllegalTransition (RuntimeError): a breaker state change the transition table forbids
    ├── StorageError (RuntimeError): the store failed
    │   ├── CorruptState: a stored value that does not decode
    │   └── ClusterUnreachable (redis.ConnectionError too): no node of a Redis Cluster answers
    ├── EscalationError: an escalation that cannot be listed, shown or resolved
    │   ├── InvalidEscalation (ValueError)
    │   ├── UnknownEscalation (LookupError)
    │   ├── AlreadyResolved
    │   └── EscalationStorageError
    ├── RelayBusy (RuntimeError): another relay holds the outbox
    ├── Undeliverable: an incident a sink gave up on
    ├── AdminInputError (ValueError), AdminError (RuntimeError): an operator's request refused
    ├── ReportError (ValueError): an input the report cannot read
    ├── ServeError (RuntimeError): a server that cannot start
    ├── TransportError (ValueError): a request the transport refuses
    ├── HookInputError (ValueError): a hook input that cannot be read
    ├── GuardFailure (RuntimeError), DaemonUnavailable, DaemonFailed (RuntimeError): a hook that
    │   could not decide
    └── ArgumentsRejected, MissingThreadId (ValueError): a drop-in's call refused
"""


class AgentBreakerError(Exception):
    """The root of every exception agent-breaker raises."""


class ConfigError(AgentBreakerError, ValueError):
    """A bad configuration value; the message names the key and the value."""
