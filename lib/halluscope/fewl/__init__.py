"""FEWL (Wei et al.): hallucination scores without gold answers, from weighted reference LLMs.

Modules: ``datasets`` (CHALE, TruthfulQA, HaluEval loaders), ``prompts``/``parsing`` (reference and
IW/CO calls), ``similarity`` (+ ``cache``), ``neighbours`` (KNN questions), ``score`` (the
formulas), ``artefacts`` (per-question preparation), ``evaluate`` (the paper's comparisons), and
the engine's side: ``options`` (``benchmarks.fewl``), ``task`` (``fewl/score``), ``report``
(metrics and sections), ``benchmark`` (the registered ``Benchmark``).
"""

from halluscope.fewl.score import Fewl, FewlParams, FewlScore, QuestionArtefacts, ReferenceTerm

__all__ = ["Fewl", "FewlParams", "FewlScore", "QuestionArtefacts", "ReferenceTerm"]
