"""What a run cost: tokens, GPU-seconds and dollars."""
