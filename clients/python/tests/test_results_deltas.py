"""FetchedResults' delta application (DESIGN.md §7), with hand-made notifications: no daemon.

A reference differ below computes the deltas the contract prescribes between two
result sets; applying them to the old results must give the new ones exactly.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Tuple

import pytest

from depot import FetchedResults, FetchedResultsDelegate, InconsistentDelta, ResultsState

Row = Dict[str, Any]


def ordered(rows: List[Row]) -> List[Row]:
    """Sorted by section key, then sort key, then id (ties broken by id, as the daemon does)."""
    return sorted(rows, key=lambda r: (r["zone"], r["rank"], int(r["id"].split("/")[1])))


def layout(rows: List[Row]) -> Tuple[List[Dict[str, Any]], Dict[str, Tuple[int, int]]]:
    """Section infos and each id's index path."""
    sections: List[Dict[str, Any]] = []
    paths: Dict[str, Tuple[int, int]] = {}
    for row in ordered(rows):
        if not sections or sections[-1]["name"] != row["zone"]:
            sections.append({"name": row["zone"], "indexTitle": row["zone"][:1].upper(), "count": 0})
        paths[row["id"]] = (len(sections) - 1, sections[-1]["count"])
        sections[-1]["count"] += 1
    return sections, paths


def state_of(rows: List[Row], seq: int = 0) -> ResultsState:
    sections, _ = layout(rows)
    return ResultsState.from_counts(sections, [r["id"] for r in ordered(rows)], {r["id"]: r for r in rows}, seq)


def diff(old: List[Row], new: List[Row], seq: int) -> Dict[str, Any]:
    """The ``results/didChange`` between two result sets, by the contract's rules."""
    old_sections, old_paths = layout(old)
    new_sections, new_paths = layout(new)
    old_by_id = {r["id"]: r for r in old}
    new_by_id = {r["id"]: r for r in new}
    old_names = [s["name"] for s in old_sections]
    new_names = [s["name"] for s in new_sections]
    sections = [{"type": "delete", "index": i, "name": n} for i, n in enumerate(old_names) if n not in new_names]
    sections += [{"type": "insert", "index": i, "name": n} for i, n in enumerate(new_names) if n not in old_names]
    objects: List[Dict[str, Any]] = []
    for object_id, path in old_paths.items():
        if object_id not in new_by_id:
            objects.append({"type": "delete", "indexPath": list(path), "id": object_id})
    for object_id, path in new_paths.items():
        row = new_by_id[object_id]
        if object_id not in old_by_id:
            objects.append({"type": "insert", "newIndexPath": list(path), "id": object_id, "object": row})
            continue
        before = old_by_id[object_id]
        if (before["zone"], before["rank"]) != (row["zone"], row["rank"]):
            objects.append({"type": "move", "indexPath": list(old_paths[object_id]), "newIndexPath": list(path),
                            "id": object_id, "object": row})
        elif before != row:
            objects.append({"type": "update", "indexPath": list(old_paths[object_id]), "newIndexPath": list(path),
                            "id": object_id, "object": row})
    random.shuffle(objects)  # The rule must not depend on the order changes are listed in.
    return {"subscription": "s1", "seq": seq, "transaction": seq + 100, "sections": sections, "objects": objects}


def random_rows(rng: random.Random, next_id: List[int], count: int) -> List[Row]:
    rows = []
    for _ in range(count):
        next_id[0] += 1
        rows.append(new_row(rng, next_id[0]))
    return rows


def new_row(rng: random.Random, number: int) -> Row:
    return {"id": f"Team/{number}", "zone": rng.choice("ABCDE"), "rank": rng.randint(0, 9), "note": rng.randint(0, 3)}


def mutate(rng: random.Random, rows: List[Row], next_id: List[int]) -> List[Row]:
    """One transaction: some deletes, inserts, moves (sort/section key changes) and updates."""
    rows = [dict(r) for r in rows]
    for _ in range(rng.randint(1, 6)):
        action = rng.random()
        if action < 0.2 and rows:
            rows.pop(rng.randrange(len(rows)))
        elif action < 0.45:
            next_id[0] += 1
            rows.append(new_row(rng, next_id[0]))
        elif rows:
            row = rng.choice(rows)
            key = rng.choice(["zone", "rank", "note"])
            row[key] = rng.choice("ABCDE") if key == "zone" else rng.randint(0, 9)
    return rows


@pytest.mark.parametrize("seed", range(200))
def test_applying_random_deltas_reproduces_a_fresh_fetch(seed: int) -> None:
    rng = random.Random(seed)
    next_id = [0]
    rows = random_rows(rng, next_id, rng.randint(0, 12))
    state = state_of(rows)
    for seq in range(1, 8):
        new_rows = mutate(rng, rows, next_id)
        state = state.applying(diff(rows, new_rows, seq))
        expected = state_of(new_rows, seq)
        assert [(s.name, s.index_title, s.ids) for s in state.sections] == \
            [(s.name, s.index_title, s.ids) for s in expected.sections]
        assert state.objects() == expected.objects()
        assert state.seq == seq
        rows = new_rows


def test_the_design_example_shape_applies() -> None:
    """The example of DESIGN.md §7: a section goes, one comes, and a delete, insert, move and update."""
    state = ResultsState.from_counts(
        [{"name": "Asia", "indexTitle": "A", "count": 1}, {"name": "Europe", "indexTitle": "E", "count": 4},
         {"name": "Oceania", "indexTitle": "O", "count": 1}],
        ["Team/1", "Team/2", "Team/3", "Team/4", "Team/5", "Team/9"],
        {f"Team/{i}": {"id": f"Team/{i}", "v": 0} for i in (1, 2, 3, 4, 5, 9)}, seq=6)
    change = {"subscription": "s1", "seq": 7, "transaction": 912,
              "sections": [{"type": "delete", "index": 2, "name": "Oceania"},
                           {"type": "insert", "index": 0, "name": "Africa"}],
              "objects": [{"type": "delete", "indexPath": [2, 0], "id": "Team/9"},
                          {"type": "insert", "newIndexPath": [0, 0], "id": "Team/10", "object": {"id": "Team/10"}},
                          {"type": "move", "indexPath": [1, 3], "newIndexPath": [2, 0], "id": "Team/5",
                           "object": {"id": "Team/5", "v": 1}},
                          {"type": "update", "indexPath": [1, 1], "newIndexPath": [2, 2], "id": "Team/3",
                           "object": {"id": "Team/3", "v": 2}}]}
    after = state.applying(change)
    assert [(s.name, s.ids) for s in after.sections] == [
        ("Africa", ["Team/10"]), ("Asia", ["Team/1"]), ("Europe", ["Team/5", "Team/2", "Team/3", "Team/4"])]
    assert after.values["Team/3"] == {"id": "Team/3", "v": 2}
    assert after.values["Team/5"]["v"] == 1
    assert "Team/9" not in after.values
    assert after.transaction == 912
    assert [s.ids for s in state.sections][2] == ["Team/9"], "the old state must be left unchanged"


@pytest.mark.parametrize("bad", [
    {"objects": [{"type": "delete", "indexPath": [0, 0], "id": "Team/2"}]},          # wrong id at path
    {"objects": [{"type": "delete", "indexPath": [3, 0], "id": "Team/1"}]},          # no such section
    {"sections": [{"type": "delete", "index": 0, "name": "A"}]},                      # section not empty
    {"objects": [{"type": "insert", "newIndexPath": [0, 5], "id": "Team/9", "object": {}}]},  # past the end
    {"objects": [{"type": "update", "indexPath": [0, 0], "newIndexPath": [0, 1], "id": "Team/1", "object": {}}]},
])
def test_a_delta_that_does_not_fit_is_refused(bad: Dict[str, Any]) -> None:
    state = ResultsState.from_counts([{"name": "A", "indexTitle": "A", "count": 2}], ["Team/1", "Team/2"],
                                     {"Team/1": {}, "Team/2": {}})
    with pytest.raises(InconsistentDelta):
        state.applying({"seq": 1, "transaction": 1, "sections": [], "objects": [], **bad})


class FakeServer:
    """Stands in for the client API FetchedResults uses (request, call, on_notification): the truth and its deltas."""

    def __init__(self, rows: List[Row]) -> None:
        self.rows = rows
        self.seq = 0
        self.listeners: Dict[str, List[Any]] = {}
        self.calls: List[str] = []

    def on_notification(self, method: str, callback: Any) -> Any:
        self.listeners.setdefault(method, []).append(callback)
        return lambda: self.listeners[method].remove(callback)

    def request(self, method: str, params: Any, on_response: Any = None) -> Any:
        result = self.call(method, params)
        if on_response is not None:
            on_response(result, None)

        class Done:
            def result(self, timeout: Optional[float] = None) -> Any:
                return result
        return Done()

    def call(self, method: str, params: Any = None, **_: Any) -> Any:
        self.calls.append(method)
        sections, _paths = layout(self.rows)
        ordered_rows = ordered(self.rows)
        if method == "results/subscribe":
            return {"subscription": "s1", "seq": 0, "transaction": 0, "count": len(self.rows),
                    "sections": sections,
                    "objects": ordered_rows if params.get("include") == "all" else ordered_rows[:2]}
        if method == "results/snapshot":
            return {"seq": self.seq, "transaction": self.seq + 100, "sections": sections,
                    "ids": [r["id"] for r in ordered_rows]}
        if method == "results/objects":
            offset, length = params["offset"], params["length"]
            return {"seq": self.seq, "objects": ordered_rows[offset:offset + length]}
        if method == "results/unsubscribe":
            return None
        raise AssertionError(method)

    def commit(self, new_rows: List[Row], deliver: bool = True) -> Dict[str, Any]:
        self.seq += 1
        change = diff(self.rows, new_rows, self.seq)
        self.rows = new_rows
        if deliver:
            self.send("results/didChange", change)
        return change

    def send(self, method: str, params: Any) -> None:
        for callback in list(self.listeners.get(method, [])):
            callback(method, params)


def expected_table(rows: List[Row]) -> List[Tuple[str, List[Row]]]:
    table: List[Tuple[str, List[Row]]] = []
    for row in ordered(rows):
        if not table or table[-1][0] != row["zone"]:
            table.append((row["zone"], []))
        table[-1][1].append(row)
    return table


def test_mirror_loads_missing_objects_follows_deltas_and_resyncs_on_a_gap() -> None:
    rng = random.Random(7)
    next_id = [0]
    server = FakeServer(random_rows(rng, next_id, 10))
    results = FetchedResults(server, {"entity": "Team", "sort": [{"key": "zone"}]}, section_key_path="zone",
                             include="firstBatch", page_size=3)
    assert results.as_sections() == expected_table(server.rows), "the first batch plus results/objects pages"
    server.commit(mutate(rng, server.rows, next_id))
    assert results.as_sections() == expected_table(server.rows)
    assert results.resync_count == 0
    assert "results/snapshot" in server.calls  # include=firstBatch: the ids came from a snapshot
    server.commit(mutate(rng, server.rows, next_id), deliver=False)  # lost: the next one makes a gap
    server.commit(mutate(rng, server.rows, next_id))
    assert results.resync_count == 1
    assert results.as_sections() == expected_table(server.rows)
    assert results.seq == server.seq


def test_mirror_resyncs_on_invalidate_and_on_a_delta_that_does_not_fit() -> None:
    rng = random.Random(11)
    next_id = [0]
    server = FakeServer(random_rows(rng, next_id, 8))
    results = FetchedResults(server, {"entity": "Team", "sort": [{"key": "zone"}]}, section_key_path="zone")
    assert results.resync_count == 0
    server.rows = mutate(rng, server.rows, next_id)
    server.seq += 5
    server.send("results/didInvalidate", {"subscription": "s1", "reason": "overflow"})
    assert results.resync_count == 1
    assert results.as_sections() == expected_table(server.rows)
    server.seq += 1
    server.send("results/didChange", {"subscription": "s1", "seq": server.seq, "transaction": 1, "sections": [],
                                      "objects": [{"type": "delete", "indexPath": [0, 0], "id": "Team/999"}]})
    assert results.resync_count == 2
    assert results.as_sections() == expected_table(server.rows)


def test_delegate_hears_each_change_in_the_controller_order() -> None:
    events: List[Any] = []

    class Recorder(FetchedResultsDelegate):
        def will_change_content(self, results: FetchedResults) -> None:
            events.append("will")

        def did_change_section(self, results: FetchedResults, section: Any, index: int, change_type: str) -> None:
            events.append(("section", change_type, index, section.name))

        def did_change_object(self, results: FetchedResults, obj: Any, index_path: Any, change_type: str,
                              new_index_path: Any) -> None:
            events.append(("object", change_type, obj["id"], index_path, new_index_path))

        def did_change_content(self, results: FetchedResults) -> None:
            events.append("did")

    rows = [{"id": "Team/1", "zone": "A", "rank": 1, "note": 0}, {"id": "Team/2", "zone": "B", "rank": 1, "note": 0}]
    server = FakeServer(rows)
    changes: List[Any] = []
    results = FetchedResults(server, {"entity": "Team"}, section_key_path="zone", delegate=Recorder())
    results.on_change(lambda r, change: changes.append(change["seq"]))
    server.commit([{"id": "Team/1", "zone": "C", "rank": 1, "note": 0}, rows[1]])
    assert events[0] == "will" and events[-1] == "did"
    assert ("section", "delete", 0, "A") in events and ("section", "insert", 1, "C") in events
    assert ("object", "move", "Team/1", (0, 0), (1, 0)) in events
    assert changes == [1]
    assert results.section_index_titles == ["B", "C"]
    assert results.index_path_for("Team/1") == (1, 0)
    assert results.object_at((0, 0))["id"] == "Team/2"
    results.close()
    assert server.calls[-1] == "results/unsubscribe"
