"""What the package is called where it is installed from (a leaf: any module may import it)."""

#: the distribution's name on the package index (`agent-breaker` there is another project's); the
#: package it installs is `agent_breaker`, the command `agent-breaker`
DISTRIBUTION = "agent-breaker-rails"
