"""Aggregates computed from written per-generation scores."""
