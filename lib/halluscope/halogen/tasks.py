"""HALOGEN's nine tasks under each rule set, in the order of the paper's Table 1."""

from __future__ import annotations

from halluscope.halogen.biographies import Biographies
from halluscope.halogen.code import CodePackages
from halluscope.halogen.grounded import simplification, summarization
from halluscope.halogen.historical_events import HistoricalEvents
from halluscope.halogen.lists import FalsePresuppositions, RationalizationNumerical
from halluscope.halogen.paper import RULE_SETS
from halluscope.halogen.rationalization_binary import RationalizationBinary
from halluscope.halogen.references import References

TASKS = [task(rules) for rules in RULE_SETS
         for task in (CodePackages, References, summarization, simplification, Biographies, HistoricalEvents,
                      FalsePresuppositions, RationalizationBinary, RationalizationNumerical)]
