"""Benchmarks as tasks: items, abstention rule, decomposition, verification."""
