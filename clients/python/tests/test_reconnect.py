"""A daemon restart: the client opens a new session by itself and resubscribes its live results."""

from __future__ import annotations

import time

from conftest import TEST_MODEL, Daemon


def test_client_reopens_its_session_and_resubscribes_after_a_restart() -> None:
    first = Daemon("--heartbeat-interval", "1")
    second = None
    try:
        client = first.client()
        client.call("model/define", TEST_MODEL)
        client.call("store/save", {"inserted": [{"entity": "Owner", "values": {"name": "ada"}}]})
        results = client.subscribe({"entity": "Owner", "sort": [{"key": "name"}]}, include="all")
        assert [o["name"] for o in results.fetched_objects] == ["ada"]
        old_session = client.session_id

        first.stop(keep_data=True)
        # The same port (an extra --listen), so that the client's socket reconnects to it.
        second = Daemon("--heartbeat-interval", "1", "--listen", first.endpoint, data_dir=first.data_dir)
        deadline = time.monotonic() + 20
        while client.reconnect_count == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.reconnect_count == 1, "the heartbeat's -32002 made the client open a new session"
        assert client.session_id != old_session

        with second.client() as writer:
            saved = writer.call("store/save", {"inserted": [{"entity": "Owner", "values": {"name": "bob"}}]})
        assert results.wait_for_transaction(saved["transaction"], timeout=10)
        assert [o["name"] for o in results.fetched_objects] == ["ada", "bob"], "resubscribed: no change lost"
        client.close()
    finally:
        if second is not None:
            second.stop(keep_data=True)
        first.stop()
