"""Run configuration: the schema (``schema``), reading YAML safely (``reader``), checks against the
registered benchmarks and the machine (``checks``), and loading from a path, URL or mapping (``load``)."""
