"""Knowledge sources the verifiers consult (package indexes, entity lists, ...)."""
