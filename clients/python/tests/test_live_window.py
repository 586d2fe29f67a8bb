"""A live window and coalescing from Python: ``limit`` in the request and ``coalesceMs`` as an option.

``Client.subscribe`` passes both to ``results/subscribe``; the mirror holds the window (a top 5)
as saves elsewhere push teams out and pull others in, folded notifications say which
transactions they cover, and the mirror equals a fresh fetch of the window (no resync).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

import depot
from conftest import Daemon

TOP = {"entity": "Team", "predicate": "qualifyingZone == 'Window'",
       "sort": [{"key": "wins", "ascending": False}, {"key": "teamName"}], "limit": 5}


def test_a_coalesced_top_five_follows_saves_elsewhere(daemon: Daemon) -> None:
    with daemon.client() as client, daemon.client() as writer:
        saved = writer.save(inserted=[{"entity": "Team", "tempId": f"t{i}", "values": {
            "teamName": f"Window {i:02d}", "qualifyingZone": "Window", "wins": i % 4}} for i in range(20)])
        ids = [saved["ids"][f"t{i}"] for i in range(20)]
        results = client.subscribe(TOP, include="all", coalesceMs=50)
        spans: List[Any] = []
        results.on_change(lambda results, change: spans.append(change.get("transactions")))
        assert len(results.ids) == 5
        last = 0
        for i, team in enumerate(ids):
            last = writer.save(updated=[{"id": team, "values": {"wins": (i * 7) % 11}}])["transaction"]
        fresh: List[Dict[str, Any]] = writer.fetch(TOP)["objects"]
        deadline = time.monotonic() + 10
        while results.fetched_objects != fresh and time.monotonic() < deadline:
            time.sleep(0.01)
        assert results.fetched_objects == fresh, "the window, values included"
        assert len(results.ids) == 5
        assert 0 < results.transaction <= last
        assert any(span is not None and span[0] < span[1] for span in spans), f"saves were folded: {spans}"
        assert len(spans) < len(ids), "fewer notifications than saves"
        assert results.resync_count == 0
        results.close()
