"""Human-readable views of a run."""
