"""halluscope: hallucination benchmarks at cluster scale."""

__version__ = "0.1.0"
