"""HALOGEN: nine domains, each response decomposed into atomic units verified against a
knowledge source or a judge; paper rules and corrected rules."""

from halluscope.halogen import downloads  # noqa: F401, E402 - its files become downloadable
