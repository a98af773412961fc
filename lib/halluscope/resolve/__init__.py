"""What a run derives from its config alone, once, before any phase of the pipeline starts: its
item source, price and throughput tables, call cache, knowledge, cluster layout and budget
(``run.ResolvedRun`` gathers them). Below the pipeline, so every phase imports it without a cycle."""
