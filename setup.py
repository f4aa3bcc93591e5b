"""The package list, found rather than kept by hand: a subpackage added to `agent_breaker/` is in
the wheel without anyone remembering to list it (tests/test_packaging.py holds the built wheel to
the source tree). Everything else about the build is in pyproject.toml."""

from setuptools import find_packages, setup

# The NeMo glue lives at the top of the repository (actions/, rails/, config/, as NeMo's own
# library/<rail>/ folders do) and installs inside the package, so the configs load the same from
# any working directory.
NEMO_GLUE = {"agent_breaker.actions": "actions", "agent_breaker.rails": "rails", "agent_breaker.configs": "config"}

setup(packages=[*find_packages(include=["agent_breaker", "agent_breaker.*"]), *NEMO_GLUE], package_dir=NEMO_GLUE)
