"""How many evaluation actors a run starts."""

from halluscope.pipeline.runner import evaluate_actors


def test_no_more_evaluate_actors_than_replayed_blocks():
    assert evaluate_actors(2, blocks=1, live=False) == 1
    assert evaluate_actors(2, blocks=5, live=False) == 2
    # a live model's generation batches, not the blocks, are what Evaluate receives
    assert evaluate_actors(2, blocks=1, live=True) == 2
