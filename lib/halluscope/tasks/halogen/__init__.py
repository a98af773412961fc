"""HALOGEN's nine tasks, in the order of the paper's Table 1."""

from halluscope.tasks.halogen.biographies import Biographies
from halluscope.tasks.halogen.code import CodePackages
from halluscope.tasks.halogen.grounded import simplification, summarization
from halluscope.tasks.halogen.historical_events import HistoricalEvents
from halluscope.tasks.halogen.lists import FalsePresuppositions, RationalizationNumerical
from halluscope.tasks.halogen.rationalization_binary import RationalizationBinary
from halluscope.tasks.halogen.references import References

TASKS = [CodePackages(), References(), summarization(), simplification(), Biographies(), HistoricalEvents(),
         FalsePresuppositions(), RationalizationBinary(), RationalizationNumerical()]
