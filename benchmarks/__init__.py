"""The benchmarks, a package: run each from the repository root as `python -m benchmarks.bench_<name>`
(see docs/performance.md). _harness.py is what they share; _trace.py is their synthetic trace."""
