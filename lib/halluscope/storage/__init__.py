"""fsspec storage: run layout, atomic writes, committed-part bookkeeping."""
