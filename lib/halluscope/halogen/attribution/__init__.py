"""Where hallucinations come from (HALOGEN §5): corpus lookups that flag a run's hallucinated
units as Type A (correct fact in the data), B (incorrect fact or co-occurrence in the data) or
C (nothing in the data: fabrication)."""
