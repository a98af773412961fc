"""How many evaluation actors a run starts: no more than the inputs Evaluate will get."""

from halluscope.pipeline.execute import evaluate_actors


def test_replayed_runs_get_no_more_actors_than_blocks():
    assert evaluate_actors(2, blocks=1, live_rows=None, generate_batch_size=4096) == 1
    assert evaluate_actors(2, blocks=5, live_rows=None, generate_batch_size=4096) == 2


def test_live_runs_count_generation_batches_not_blocks():
    # every row in one generation batch: one input, whatever the blocks
    assert evaluate_actors(2, blocks=3, live_rows=4096, generate_batch_size=4096) == 1
    assert evaluate_actors(2, blocks=1, live_rows=4097, generate_batch_size=4096) == 2
