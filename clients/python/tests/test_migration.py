"""Live results across a migration (DESIGN.md §7, Across a migration), through the Python client:
the migration is a transaction whose notification updates the rows it changed, objects arrive in
the new shape, and a request naming a renamed key ends with ``results/didInvalidate {reason: "model"}``.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

import depot

NOTE = {"name": "Memo", "attributes": [{"name": "title", "type": "string"},
                                       {"name": "rank", "type": "integer", "default": 0}]}


def without_nil(objects: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Objects with their nil members left out: a key an object lacks reads as nil."""
    return [{k: v for k, v in o.items() if v is not None} for o in objects]


def test_a_migration_reaches_live_results_as_updates_and_the_new_shape(client: depot.Client) -> None:
    client.call("model/define", {"entities": [NOTE]})
    client.save(inserted=[{"entity": "Memo", "values": {"title": t}} for t in ("b", "a", "c")])
    request = {"entity": "Memo", "sort": [{"key": "title"}]}
    by_title = client.subscribe(request, include="all")
    by_rank = client.subscribe({"entity": "Memo", "sort": [{"key": "rank"}]}, include="all")

    migrated = {**NOTE, "attributes": [{"name": "heading", "type": "string", "renamedFrom": "title"},
                                       {"name": "rank", "type": "integer", "default": 0},
                                       {"name": "stars", "type": "integer", "default": 5},
                                       {"name": "note", "type": "string", "optional": True}]}
    defined = client.call("model/define", {"entities": [migrated]})
    assert isinstance(defined["transaction"], int), "a migration is a transaction"
    assert by_rank.wait_for_transaction(defined["transaction"])
    # The request sorted by the renamed key ended; the other holds the new shape.
    deadline = time.monotonic() + 10
    while by_title.ended is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert by_title.ended == "model"
    assert [o["heading"] for o in by_rank.fetched_objects] == ["b", "a", "c"]  # ties in id order
    assert all(o["stars"] == 5 and "title" not in o for o in by_rank.fetched_objects)

    saved = client.save(inserted=[{"entity": "Memo", "values": {"heading": "d", "note": "new", "rank": 1}}])
    assert by_rank.wait_for_transaction(saved["transaction"])
    assert by_rank.fetched_objects[-1]["note"] == "new"
    fresh = client.fetch({"entity": "Memo", "sort": [{"key": "rank"}]})["objects"]
    assert without_nil(by_rank.fetched_objects) == without_nil(fresh)
    try:
        client.subscribe(request)
        raise AssertionError("a request naming the old key was subscribed")
    except depot.InvalidParamsError as error:
        assert error.data["field"] == "params.request.sort[0].key"
    by_rank.close()
    by_title.close()
