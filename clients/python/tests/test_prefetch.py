"""Prefetching and live relationships from Python (DESIGN.md §5, §7): ``fetch(..., prefetch=[...])``
answers ``related`` by id; ``subscribe(..., prefetch=[...])`` keeps the related objects live, so a
renamed team updates exactly the match rows showing it and ``follow`` reads it without a round
trip; after every save the mirror's rows and related objects equal a fresh fetch; ``depot fetch
--column homeTeam.teamName`` reads through the relationship."""

from __future__ import annotations

import time
from typing import Any, Dict, List

import pytest

import depot
from conftest import Daemon
from test_cli import run_depot

MATCH = {"entities": [
    {"name": "Match", "attributes": [{"name": "round", "type": "string"}, {"name": "score", "type": "integer"}],
     "relationships": [{"name": "homeTeam", "destination": "Team"}, {"name": "awayTeam", "destination": "Team"}]},
]}

REQUEST = {"entity": "Match", "sort": [{"key": "score"}]}


@pytest.fixture()
def league(client: depot.Client) -> Dict[str, str]:
    """Three teams and six matches between them; the ids by tempId."""
    client.call("model/define", MATCH)
    old = client.fetch({"entity": "Match", "resultType": "ids"})["ids"]
    if old:
        client.save(deleted=[{"id": i} for i in old])
    inserted: List[Dict[str, Any]] = [
        {"entity": "Team", "tempId": f"t{i}", "values": {"teamName": f"Prefetch {i}", "qualifyingZone": "PF"}}
        for i in range(3)]
    inserted += [{"entity": "Match", "tempId": f"m{i}", "values": {
        "round": "group", "score": i, "homeTeam": f"t{i % 3}", "awayTeam": f"t{(i + 1) % 3}"}} for i in range(6)]
    ids: Dict[str, str] = client.save(inserted=inserted)["ids"]
    yield ids
    client.save(deleted=[{"id": ids[f"m{i}"]} for i in range(6)])
    client.save(deleted=[{"id": ids[f"t{i}"]} for i in range(3)])


def test_fetch_answers_each_related_object_once_by_id(client: depot.Client, league: Dict[str, str]) -> None:
    result = client.fetch(REQUEST, prefetch=["homeTeam", "awayTeam"])
    assert len(result["objects"]) == 6
    assert set(result["related"]) == {league[f"t{i}"] for i in range(3)}
    assert result["related"][league["t0"]]["teamName"] == "Prefetch 0"
    small = client.fetch({**REQUEST, "limit": 1}, prefetch=["homeTeam"])
    assert set(small["related"]) == {league["t0"]}
    with pytest.raises(depot.InvalidParamsError) as raised:
        client.fetch(REQUEST, prefetch=["homeTeam.nope"])
    assert raised.value.data["field"] == "params.prefetch[0]" and "nope" in raised.value.message


def wait_for(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_a_renamed_team_updates_exactly_the_rows_showing_it(client: depot.Client,
                                                             league: Dict[str, str]) -> None:
    changes: List[Dict[str, Any]] = []
    with client.subscribe(REQUEST, prefetch=["homeTeam"], include="all") as results:
        results.on_change(lambda _, change: changes.append(change) if change else None)
        first = results.fetched_objects[0]
        assert results.follow(first, "homeTeam")["teamName"] == "Prefetch 0"

        saved = client.save(updated=[{"id": league["t1"], "values": {"teamName": "Renamed"}}])
        assert results.wait_for_transaction(saved["transaction"])
        assert len(changes) == 1
        updated = {c["id"] for c in changes[0]["objects"]}
        assert updated == {league["m1"], league["m4"]}, changes[0]
        assert all(c["type"] == "update" for c in changes[0]["objects"])
        assert changes[0]["related"][league["t1"]]["teamName"] == "Renamed"
        assert results.follow(league["m1"], "homeTeam")["teamName"] == "Renamed"

        # A save that no row's graph reaches notifies nothing.
        client.save(inserted=[{"entity": "Team", "values": {"teamName": "Nobody's", "qualifyingZone": "PF"}}])
        # Re-pointed: the old team leaves the graph when no row shows it any more.
        for match in ("m0", "m3"):
            saved = client.save(updated=[{"id": league[match], "values": {"homeTeam": league["t1"]}}])
        assert results.wait_for_transaction(saved["transaction"])
        assert len(changes) == 3, changes
        assert league["t0"] in changes[-1].get("relatedRemoved", [])
        fresh = client.fetch(REQUEST, prefetch=["homeTeam"])
        assert results.fetched_objects == fresh["objects"]
        assert results.related == fresh["related"]


def test_cli_columns_read_through_relationships(daemon: Daemon, league: Dict[str, str]) -> None:
    done = run_depot("--connect", daemon.endpoint, "fetch", "Match", "--sort", "score", "--column", "score",
                     "--column", "homeTeam.teamName", "--column", "awayTeam.teamName")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["id", "score", "homeTeam.teamName", "awayTeam.teamName"]
    assert lines[2].split()[1:] == ["0", "Prefetch", "0", "Prefetch", "1"]
    assert "3 related objects" in done.stderr
