"""HALOGEN: nine domains, each response decomposed into atomic units verified against a
knowledge source or a judge; paper rules and corrected rules."""
