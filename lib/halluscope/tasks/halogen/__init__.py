"""HALOGEN (program-verified tasks so far): code packages, rationalization, false presuppositions."""

from halluscope.tasks.halogen.code import CodePackages
from halluscope.tasks.halogen.lists import FalsePresuppositions, RationalizationNumerical
from halluscope.tasks.halogen.rationalization_binary import RationalizationBinary

TASKS = [CodePackages(), RationalizationBinary(), RationalizationNumerical(), FalsePresuppositions()]
