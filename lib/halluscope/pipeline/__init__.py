"""The Ray Data pipeline: items -> generate -> abstain -> decompose -> verify -> score -> write."""
