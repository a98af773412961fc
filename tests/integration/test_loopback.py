"""The servers the tests start keep to 127.0.0.1: the session's Ray head and every process it
started listen on loopback alone (tests/conftest.py keeps Ray from swapping 127.0.0.1 for the
machine's own address), and none of them outlives the head (tests/unit/test_head_teardown.py)."""

from __future__ import annotations

from tests.support.servers import listening_addresses, process_tree


def test_the_ray_head_and_its_processes_listen_on_loopback_alone(ray_head):
    head = process_tree(ray_head["temp_dir"], f"--address={ray_head['address']}")
    addresses = listening_addresses(head)
    # the GCS, the raylet, the dashboard and its agents, the client server: none listens elsewhere
    assert addresses == {"127.0.0.1"}, addresses
