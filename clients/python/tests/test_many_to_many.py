"""Many-to-many relationships from Python: to-many values are lists of ids.

Saves set the whole set with a list (ids or tempIds of the same save) or change it with
``depot.members(add=..., remove=...)``; fetches return the lists when ``properties`` name
the relationship; a live FetchedResults through the relationship follows pair changes with
exact deltas (no resync) and equals a fresh fetch after every save.
"""

from __future__ import annotations

import random
import time
from typing import Any, Dict, List, Set

import pytest

import depot
from conftest import Daemon

MODEL = {"entities": [
    {"name": "Post", "attributes": [{"name": "title", "type": "string"}],
     "relationships": [{"name": "tags", "destination": "Tag", "toMany": True, "inverse": "posts"}]},
    {"name": "Tag", "attributes": [{"name": "name", "type": "string"}],
     "relationships": [{"name": "posts", "destination": "Post", "toMany": True, "inverse": "tags"}]},
]}


def tag_set(client: depot.Client, obj: str, key: str = "tags") -> Set[str]:
    return set(client.call("store/get", {"ids": [obj], "properties": [key]})["objects"][0][key])


def test_lists_of_ids_set_add_and_remove_members(client: depot.Client) -> None:
    client.call("model/define", MODEL)
    saved = client.save(inserted=[
        {"entity": "Tag", "tempId": "a", "values": {"name": "a"}},
        {"entity": "Tag", "tempId": "b", "values": {"name": "b"}},
        {"entity": "Tag", "tempId": "c", "values": {"name": "c"}},
        {"entity": "Post", "tempId": "p", "values": {"title": "hello", "tags": ["a", "b"]}},
    ])
    a, b, c, post = (saved["ids"][k] for k in "abcp")
    # Reading: a list of ids, on both sides, when properties name the relationship.
    fetched = client.fetch({"entity": "Post", "properties": ["title", "tags"]})["objects"]
    assert [sorted(o["tags"]) for o in fetched] == [sorted([a, b])]
    assert "tags" not in client.fetch({"entity": "Post"})["objects"][0], "only when properties name it"
    assert tag_set(client, a, "posts") == {post}
    # The {add, remove} form; another client adds meanwhile and nothing is lost.
    with depot.Client(client.endpoint, timeout=20) as other:
        other.save(updated=[{"id": post, "values": {"tags": depot.members(add=[c])}}])
    client.save(updated=[{"id": post, "values": {"tags": depot.members(remove=[a])}}])
    assert tag_set(client, post) == {b, c}
    # The whole set, from the tag's side.
    client.save(updated=[{"id": c, "values": {"posts": []}}])
    assert tag_set(client, post) == {b}
    assert depot.members(add=[a], remove=[b]) == {"add": [a], "remove": [b]}
    with pytest.raises(ValueError):
        depot.members()
    # A bad shape is refused naming the key.
    with pytest.raises(depot.ValidationError) as raised:
        client.save(updated=[{"id": post, "values": {"tags": {"put": [a]}}}])
    assert raised.value.data["errors"][0]["key"] == "tags"


def test_fetched_results_through_the_relationship_follow_pairs(daemon: Daemon) -> None:
    with daemon.client() as client, daemon.client() as writer:
        client.call("model/define", MODEL)
        saved = writer.save(inserted=[{"entity": "Tag", "tempId": n, "values": {"name": n}} for n in ("x", "y", "z")]
                            + [{"entity": "Post", "tempId": f"p{i}", "values": {"title": f"post {i:02d}"}}
                               for i in range(12)])
        tags = [saved["ids"][n] for n in ("x", "y", "z")]
        posts = [saved["ids"][f"p{i}"] for i in range(12)]
        request: Dict[str, Any] = {"entity": "Post", "predicate": "ANY tags.name == 'x'",
                                   "sort": [{"key": "title"}], "properties": ["title", "tags"]}
        results = client.subscribe(request, include="all")
        rng = random.Random(15)
        changes = 0
        for step in range(40):
            post, tag = rng.choice(posts), rng.choice(tags)
            kind = rng.randrange(4)
            if kind == 0:
                values: Dict[str, Any] = {"tags": depot.members(add=[tag])}
                writer.save(updated=[{"id": post, "values": values}])
            elif kind == 1:
                writer.save(updated=[{"id": post, "values": {"tags": depot.members(remove=[tag])}}])
            elif kind == 2:
                writer.save(updated=[{"id": tag, "values": {"posts": rng.sample(posts, rng.randrange(4))}}])
            else:
                writer.save(updated=[{"id": post, "values": {"tags": rng.sample(tags, rng.randrange(3))}}])
            fresh = _normalised(writer.fetch(request)["objects"])
            # The delta reaches the other session's client at about the time the save is answered.
            deadline = time.monotonic() + 10
            while _normalised(results.fetched_objects) != fresh and time.monotonic() < deadline:
                time.sleep(0.005)
            assert _normalised(results.fetched_objects) == fresh, f"step {step}"
            changes = results.seq
        assert changes > 5, "saves moved posts in and out of the results"
        assert results.resync_count == 0, "every delta applied exactly"
        results.close()


def _normalised(objects: List[Dict[str, Any]]) -> List[Any]:
    return [(o["id"], o["title"], sorted(o["tags"])) for o in objects]
