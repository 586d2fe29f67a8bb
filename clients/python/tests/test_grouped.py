"""Grouped fetches (DESIGN.md §5) against a real daemon with the World Cup teams: each answer is held
to the groups this test computes from the objects themselves, with nil groups, having, sorts by
aggregates, paging, dates in min/max, doubles (within 1e-9 relative), a to-one key path, counts of
groups, streaming, and -32602 naming the field for every bad request."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

import depot
from conftest import FIXTURES, TRAFFIC, Daemon

#: Matches of the World Cup teams, with a nil venue, goals, attendance or date now and then.
MATCH = {"name": "Match",
         "attributes": [{"name": "venue", "type": "string", "optional": True},
                        {"name": "goals", "type": "integer", "optional": True},
                        {"name": "attendance", "type": "double", "optional": True},
                        {"name": "playedAt", "type": "date", "optional": True},
                        {"name": "notes", "type": "json", "optional": True}],
         "relationships": [{"name": "team", "destination": "Team"}]}

VENUES = ["Maracanã", "Wembley", "Azteca", None, "Soccer City"]


@pytest.fixture(scope="module")
def world(daemon: Daemon) -> Iterator[Dict[str, List[Dict[str, Any]]]]:
    """The 32 World Cup teams (wins 0…6 by name) and 96 matches; what the store holds of them."""
    fixture = json.loads((FIXTURES / "worldcup.json").read_text())
    with daemon.client() as client:
        client.call("model/define", {"entities": [MATCH]})
        teams = [{"entity": "Team", "tempId": f"t{i}", "values": {**team, "wins": (i * 5) % 7}}
                 for i, team in enumerate(fixture["teams"])]
        matches = []
        for i in range(96):
            values: Dict[str, Any] = {
                "venue": VENUES[i % 5], "goals": None if i % 11 == 0 else i % 6,
                "attendance": None if i % 13 == 0 else 10000.5 + (i * 7919) % 50000 / 4,
                "playedAt": None if i % 9 == 0 else f"2026-06-{1 + i % 28:02d}T{i % 24:02d}:30:00.{i % 1000:03d}Z",
                "team": f"t{i % 32}"}
            matches.append({"entity": "Match", "values": values})
        client.save(inserted=teams + matches)
        yield {"Team": client.fetch({"entity": "Team"})["objects"],
               "Match": client.fetch({"entity": "Match"})["objects"]}


# -- the groups computed here, from the objects -------------------------------------------------

def _order_key(value: Any) -> Tuple[int, Any]:
    """SQL's ascending order: nil first, then numbers, then text by code points (UTF-8 bytes); dates
    are ISO 8601 texts of one format (milliseconds, Z), which order as their instants do."""
    if value is None:
        return (0, 0)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value)
    if isinstance(value, bool):
        return (1, int(value))
    return (2, value.encode())


def groups_of(objects: Sequence[Dict[str, Any]], group_by: Sequence[str],
              aggregates: Sequence[Dict[str, Any]], resolve: Callable[[Dict[str, Any], str], Any],
              where: Callable[[Dict[str, Any]], bool] = lambda o: True,
              having: Callable[[Dict[str, Any]], bool] = lambda g: True,
              sort: Sequence[Tuple[str, bool]] = (), offset: int = 0,
              limit: Optional[int] = None) -> List[Dict[str, Any]]:
    """The dictionaries a grouped fetch should answer, computed in Python."""
    members: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}
    for obj in objects:
        if where(obj):
            members.setdefault(tuple(resolve(obj, key) for key in group_by), []).append(obj)
    rows = []
    for key, group in members.items():
        row: Dict[str, Any] = dict(zip(group_by, key))
        for aggregate in aggregates:
            values = [resolve(o, aggregate["key"]) for o in group] if aggregate.get("key") else None
            present = [v for v in values if v is not None] if values is not None else None
            function = aggregate["function"]
            if function == "count":
                row[aggregate["name"]] = len(group) if present is None else len(present)
            elif function == "sum":
                row[aggregate["name"]] = sum(present or [])
            elif function == "avg":
                row[aggregate["name"]] = sum(present) / len(present) if present else None
            elif function == "min":
                row[aggregate["name"]] = min(present, key=_order_key) if present else None
            else:
                row[aggregate["name"]] = max(present, key=_order_key) if present else None
        if having(row):
            rows.append(row)
    # Ties broken by the groupBy keys in order: sort by them first, then (stably) by the sort keys.
    rows.sort(key=lambda r: [_order_key(r[k]) for k in group_by])
    for name, ascending in reversed(sort):
        rows.sort(key=lambda r: _order_key(r[name]), reverse=not ascending)
    return rows[offset:None if limit is None else offset + limit]


def assert_same_groups(got: List[Dict[str, Any]], expected: List[Dict[str, Any]]) -> None:
    assert len(got) == len(expected), f"{len(got)} groups, expected {len(expected)}:\n{got}\n{expected}"
    for index, (row, want) in enumerate(zip(got, expected)):
        assert set(row) == set(want), f"group {index}: {row} against {want}"
        for key, value in want.items():
            if isinstance(value, float) or isinstance(row[key], float):
                assert row[key] is not None and math.isclose(row[key], value, rel_tol=1e-9), (index, key, row, want)
            else:
                assert row[key] == value, f"group {index}, {key}: {row} against {want}"


def attribute(obj: Dict[str, Any], key: str) -> Any:
    return obj.get(key)


# -- tests ----------------------------------------------------------------------------------------

WINS = [{"name": "teams", "function": "count"}, {"name": "wins", "function": "sum", "key": "wins"},
        {"name": "average", "function": "avg", "key": "wins"}, {"name": "best", "function": "max", "key": "wins"},
        {"name": "first", "function": "min", "key": "teamName"}]


def test_wins_per_zone_match_the_groups_of_the_teams(client: depot.Client, world: Dict[str, Any]) -> None:
    answer = client.fetch({"entity": "Team", "sort": [{"key": "qualifyingZone"}]},
                          group_by=["qualifyingZone"], aggregates=WINS)
    expected = groups_of(world["Team"], ["qualifyingZone"], WINS, attribute, sort=[("qualifyingZone", True)])
    assert len(expected) == 5
    assert_same_groups(answer["objects"], expected)
    europe = next(g for g in answer["objects"] if g["qualifyingZone"] == "Europe")
    assert isinstance(europe["teams"], int) and isinstance(europe["wins"], int)
    assert isinstance(europe["average"], float)
    assert answer["transaction"] > 0


def test_sort_by_aggregate_ties_broken_by_group_keys_and_paging(client: depot.Client,
                                                               world: Dict[str, Any]) -> None:
    aggregates = [{"name": "teams", "function": "count"}, {"name": "best", "function": "max", "key": "wins"}]
    request = {"entity": "Team", "sort": [{"key": "best", "ascending": False}], "groupBy": ["qualifyingZone"],
               "aggregates": aggregates}
    full = groups_of(world["Team"], ["qualifyingZone"], aggregates, attribute, sort=[("best", False)])
    assert_same_groups(client.fetch(request)["objects"], full)
    for offset, limit in ((0, 2), (2, 2), (4, 2), (1, 0), (7, 3)):
        page = client.fetch({**request, "offset": offset, "limit": limit})["objects"]
        assert_same_groups(page, full[offset:offset + limit])
        assert client.call("store/count", {**request, "offset": offset, "limit": limit})["count"] == len(
            full[offset:offset + limit])
    assert client.call("store/count", request)["count"] == 5
    assert client.call("store/fetch", {**request, "resultType": "count"})["count"] == 5


def test_having_over_aggregates_and_keys_with_arguments(client: depot.Client, world: Dict[str, Any]) -> None:
    answer = client.fetch({"entity": "Team", "predicate": "wins > %d", "arguments": [0],
                           "sort": [{"key": "wins", "ascending": False}]},
                          group_by=["qualifyingZone"], aggregates=WINS,
                          having="teams >= 3 AND qualifyingZone != 'Asia'")
    expected = groups_of(world["Team"], ["qualifyingZone"], WINS, attribute, where=lambda t: t["wins"] > 0,
                         having=lambda g: g["teams"] >= 3 and g["qualifyingZone"] != "Asia", sort=[("wins", False)])
    assert expected and len(expected) < 5
    assert_same_groups(answer["objects"], expected)


def test_nil_groups_dates_and_doubles(client: depot.Client, world: Dict[str, Any]) -> None:
    aggregates = [{"name": "matches", "function": "count"},
                  {"name": "scored", "function": "count", "key": "goals"},
                  {"name": "goals", "function": "sum", "key": "goals"},
                  {"name": "crowd", "function": "avg", "key": "attendance"},
                  {"name": "total", "function": "sum", "key": "attendance"},
                  {"name": "first", "function": "min", "key": "playedAt"},
                  {"name": "last", "function": "max", "key": "playedAt"},
                  {"name": "smallest", "function": "min", "key": "attendance"}]
    answer = client.fetch({"entity": "Match", "sort": [{"key": "venue"}]}, group_by=["venue"],
                          aggregates=aggregates)["objects"]
    expected = groups_of(world["Match"], ["venue"], aggregates, attribute, sort=[("venue", True)])
    assert expected[0]["venue"] is None, "nil is a group of its own, first in ascending order"
    assert_same_groups(answer, expected)
    assert answer[0]["venue"] is None and answer[0]["matches"] == sum(1 for m in world["Match"] if m["venue"] is None)
    # A date stays a date text, exactly as the objects carry it.
    assert all(isinstance(g["first"], str) and g["first"].endswith("Z") for g in answer)
    # Group by a date and a double: the values come back as saved; nil dates are a group too.
    by_date = client.fetch({"entity": "Match", "sort": [{"key": "playedAt", "ascending": False}], "limit": 4},
                           group_by=["playedAt"], aggregates=[{"name": "n", "function": "count"}])["objects"]
    assert_same_groups(by_date, groups_of(world["Match"], ["playedAt"], [{"name": "n", "function": "count"}],
                                          attribute, sort=[("playedAt", False)], limit=4))
    crowded = client.fetch({"entity": "Match", "sort": [{"key": "crowd"}]}, group_by=["venue"],
                           aggregates=aggregates, having="crowd > 20000.5 OR last < '2026-06-03T00:00:00Z'")["objects"]
    assert_same_groups(crowded, groups_of(
        world["Match"], ["venue"], aggregates, attribute, sort=[("crowd", True)],
        having=lambda g: (g["crowd"] is not None and g["crowd"] > 20000.5)
        or (g["last"] is not None and g["last"] < "2026-06-03T00:00:00.000Z")))


def test_group_by_a_to_one_key_path(client: depot.Client, world: Dict[str, Any]) -> None:
    teams = {t["id"]: t for t in world["Team"]}

    def resolve(obj: Dict[str, Any], key: str) -> Any:
        if key.startswith("team."):
            return teams[obj["team"]][key[5:]] if obj.get("team") else None
        return obj.get(key)

    aggregates = [{"name": "goals", "function": "sum", "key": "goals"},
                  {"name": "bestTeamWins", "function": "max", "key": "team.wins"}]
    answer = client.fetch({"entity": "Match", "sort": [{"key": "goals", "ascending": False}]},
                          group_by=["team.qualifyingZone", "venue"], aggregates=aggregates,
                          having="team.qualifyingZone BEGINSWITH 'A'")["objects"]
    expected = groups_of(world["Match"], ["team.qualifyingZone", "venue"], aggregates, resolve,
                         sort=[("goals", False)], having=lambda g: g["team.qualifyingZone"].startswith("A"))
    assert len(expected) > 5
    assert_same_groups(answer, expected)


def test_aggregates_without_group_by_and_no_objects_no_groups(client: depot.Client, world: Dict[str, Any]) -> None:
    totals = client.fetch({"entity": "Team"}, aggregates=[{"name": "teams", "function": "count"},
                                                          {"name": "wins", "function": "sum", "key": "wins"}])
    assert totals["objects"] == [{"teams": 32, "wins": sum(t["wins"] for t in world["Team"])}]
    for grouped in ({"groupBy": ["qualifyingZone"]}, {"aggregates": [{"name": "n", "function": "count"}]}):
        none = client.fetch({"entity": "Team", "predicate": "qualifyingZone == 'Atlantis'", **grouped})
        assert none["objects"] == []
        assert client.call("store/count", {"entity": "Team", "predicate": "qualifyingZone == 'Atlantis'",
                                           **grouped})["count"] == 0


def test_groups_stream_with_progress(client: depot.Client, world: Dict[str, Any]) -> None:
    chunks: List[List[Any]] = []
    reports: List[Dict[str, Any]] = []
    answer = client.fetch({"entity": "Match", "batchSize": 2, "sort": [{"key": "venue"}]}, group_by=["venue"],
                          on_objects=chunks.append, progress=reports.append)
    assert [len(c) for c in chunks] == [2, 2, 1]
    assert [g["venue"] for g in answer["objects"]] == [None, "Azteca", "Maracanã", "Soccer City", "Wembley"]
    assert reports[0]["kind"] == "begin" and reports[0].get("total") == 5


def test_async_client_groups_too(daemon: Daemon, world: Dict[str, Any]) -> None:
    async def run() -> List[Dict[str, Any]]:
        async with await depot.AsyncClient.connect(daemon.endpoint, recorder=TRAFFIC.recorder(), timeout=20) as client:
            answer = await client.fetch({"entity": "Team", "sort": [{"key": "qualifyingZone"}]},
                                        group_by=["qualifyingZone"], aggregates=WINS)
            return answer["objects"]

    assert_same_groups(asyncio.run(run()),
                       groups_of(world["Team"], ["qualifyingZone"], WINS, attribute, sort=[("qualifyingZone", True)]))


BAD: List[Tuple[Dict[str, Any], str]] = [
    ({"groupBy": ["colour"]}, "params.groupBy[0]"),
    ({"entity": "Match", "groupBy": ["venue", "notes"]}, "params.groupBy[1]"),
    ({"entity": "Match", "aggregates": [{"name": "n", "function": "max", "key": "notes"}]},
     "params.aggregates[0].key"),
    ({"groupBy": ["qualifyingZone", "qualifyingZone"]}, "params.groupBy[1]"),
    ({"aggregates": [{"name": "w", "function": "sum", "key": "teamName"}]}, "params.aggregates[0].key"),
    ({"aggregates": [{"name": "w", "function": "avg", "key": "teamName"}]}, "params.aggregates[0].key"),
    ({"aggregates": [{"name": "w", "function": "max", "key": "colour"}]}, "params.aggregates[0].key"),
    ({"aggregates": [{"name": "n", "function": "count"}, {"name": "n", "function": "sum", "key": "wins"}]},
     "params.aggregates[1].name"),
    ({"groupBy": ["wins"], "aggregates": [{"name": "wins", "function": "count"}]}, "params.aggregates[0].name"),
    ({"aggregates": [{"name": "m", "function": "median", "key": "wins"}]}, "params.aggregates[0].function"),
    ({"aggregates": [{"name": "m", "function": "min"}]}, "params.aggregates[0].key"),
    ({"groupBy": ["qualifyingZone"], "sort": [{"key": "wins"}]}, "params.sort[0].key"),
    ({"groupBy": ["qualifyingZone"], "having": "wins > 1"}, "having"),
    ({"groupBy": ["qualifyingZone"], "resultType": "objects"}, "params.resultType"),
    ({"groupBy": ["qualifyingZone"], "properties": ["wins"]}, "params.properties"),
    ({"having": "TRUEPREDICATE"}, "params.groupBy"),
]


@pytest.mark.parametrize("bad,field", BAD, ids=[field + ":" + json.dumps(b)[:40] for b, field in BAD])
def test_bad_grouped_requests_name_the_field(client: depot.Client, world: Dict[str, Any], bad: Dict[str, Any],
                                             field: str) -> None:
    before = client.call("store/count", {"entity": "Team"})["count"]
    for method in ("store/fetch", "store/count"):
        with pytest.raises(depot.InvalidParamsError) as raised:
            client.call(method, {"entity": "Team", **bad})
        assert raised.value.code == -32602
        assert raised.value.data["field"] == field, raised.value.message
    assert client.call("store/count", {"entity": "Team"})["count"] == before


#: A small entity of its own for the live tests, so that the module's World Cup data stays as it is.
SCORE = {"name": "Score",
         "attributes": [{"name": "zone", "type": "string", "optional": True},
                        {"name": "points", "type": "integer", "optional": True},
                        {"name": "ratio", "type": "double", "optional": True}]}

LIVE = [
    ({"entity": "Score", "sort": [{"key": "total", "ascending": False}], "limit": 3},
     {"group_by": ["zone"], "aggregates": [{"name": "n", "function": "count"},
                                           {"name": "total", "function": "sum", "key": "points"},
                                           {"name": "mean", "function": "avg", "key": "ratio"},
                                           {"name": "best", "function": "max", "key": "points"}]}, None),
    ({"entity": "Score", "sort": [{"key": "zone"}], "predicate": "points != nil"},
     {"group_by": ["zone"], "aggregates": [{"name": "n", "function": "count"}], "having": "n >= 2"}, "zone"),
]


def test_grouped_subscriptions_follow_saves_as_a_fresh_grouped_fetch(client: depot.Client,
                                                                      world: Dict[str, Any]) -> None:
    client.call("model/define", {"entities": [SCORE]})
    zones = ["A", "B", "C", None]
    client.save(inserted=[{"entity": "Score", "values": {"zone": zones[i % 4], "points": i % 7,
                                                          "ratio": (i % 5) / 2}} for i in range(20)])
    live = [client.subscribe(request, section_key_path=section, include="all", **grouping)
            for request, grouping, section in LIVE]

    def check() -> None:
        for results, (request, grouping, section) in zip(live, LIVE):
            fresh = client.fetch(request, **grouping)["objects"]
            rows = results.fetched_objects
            # Every row carries its id (DESIGN.md §7), the one the deltas name; the fetch's groups have none.
            assert [row["id"] for row in rows] == results.ids
            assert [{k: v for k, v in row.items() if k != "id"} for row in rows] == fresh
            assert results.ids == ["group:" + json.dumps([group["zone"]], separators=(",", ":")) for group in fresh]
            if section is not None:
                assert [s.name for s in results.sections] == list(dict.fromkeys(g["zone"] or "" for g in fresh))

    check()
    ids = [o["id"] for o in client.fetch({"entity": "Score", "sort": [{"key": "points"}]})["objects"]]
    steps = [
        lambda: client.save(updated=[{"id": ids[0], "values": {"zone": "D", "points": 40}}]),
        lambda: client.save(deleted=[{"id": i} for i in ids[1:6]]),
        lambda: client.call("store/batchUpdate", {"entity": "Score", "predicate": "zone == 'B'",
                                                  "values": {"zone": "A"}}),
        lambda: client.call("store/batchInsert", {"entity": "Score", "objects": [
            {"zone": "E", "points": 3, "ratio": 0.5}, {"zone": "E", "points": None, "ratio": 1.5}]}),
        lambda: client.call("store/batchDelete", {"entity": "Score", "predicate": "zone == 'A'"}),
    ]
    for step in steps:
        # The session gets a transaction's results/didChange before the answer to the write.
        step()
        check()
    for results in live:
        results.close()


def test_a_grouped_subscription_sections_by_a_groupby_key_only(client: depot.Client, world: Dict[str, Any]) -> None:
    with pytest.raises(depot.InvalidParamsError) as raised:
        client.subscribe({"entity": "Team", "sort": [{"key": "n"}]}, section_key_path="n",
                         group_by=["qualifyingZone"], aggregates=[{"name": "n", "function": "count"}])
    assert raised.value.data["field"] == "params.sectionKeyPath"
