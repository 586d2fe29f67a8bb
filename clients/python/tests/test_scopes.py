"""Row-level scopes from Python and the CLI (DESIGN.md §2, docs/scopes.md).

A daemon with a policy: ``member`` keys read their own and the shared notes and
write only their own. ``depot export`` with a member's key writes only what the
member sees, the Python client's ``store/observe`` hears only of it and its
``store/history`` repeats what it heard; an observer whose scope cannot be
evaluated ends with ``store/observeDidEnd``. An entity a member cannot read
(``Secret``) does not exist for it, and two members whose names are look-alikes
(``jos\u00e9``, ``jose\u0301``) never see each other's notes.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import threading
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest

import depot
from conftest import DEPOT, Daemon

MODEL = {"entities": [{"name": "Note", "attributes": [
    {"name": "title", "type": "string"}, {"name": "owner", "type": "string"},
    {"name": "shared", "type": "boolean", "default": False}]},
    {"name": "Secret", "attributes": [{"name": "code", "type": "string"}]}]}

POLICY = {"roles": {"member": {"base": "write", "entities": {
    "Note": {"read": "owner == $keyName OR shared == YES", "write": "owner == $keyName"},
    "Secret": {"read": "FALSEPREDICATE", "write": "FALSEPREDICATE"}}},
    "matcher": {"base": "read", "entities": {"Note": {"read": "title MATCHES $pattern"}}}}}


# Two key names that are canonically equivalent but differ in their bytes.
COMPOSED = "jos\u00e9"
DECOMPOSED = "jose\u0301"


def generate(directory: pathlib.Path, name: str) -> Dict[str, pathlib.Path]:
    if not os.path.exists(DEPOT):
        pytest.skip(f"depot not built at {DEPOT}")
    done = subprocess.run([DEPOT, "keys", "generate", str(directory / name)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return {"key": directory / f"{name}.key", "pub": directory / f"{name}.pub"}


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    directory = tmp_path_factory.mktemp("scopes")
    keys = {name: generate(directory, name)
            for name in ("server", "alice", "bob", "ops", "dana", "composed", "decomposed")}
    lines = [f"{depot.keys.read_key(str(keys['alice']['pub']))} member alice",
             f"{depot.keys.read_key(str(keys['composed']['pub']))} member {COMPOSED}",
             f"{depot.keys.read_key(str(keys['decomposed']['pub']))} member {DECOMPOSED}",
             f"{depot.keys.read_key(str(keys['bob']['pub']))} member bob",
             f"{depot.keys.read_key(str(keys['ops']['pub']))} admin ops",
             f"{depot.keys.read_key(str(keys['dana']['pub']))} matcher dana pattern=(a+)+b"]
    (directory / "authorized_keys").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "policy.json").write_text(json.dumps(POLICY))
    (directory / "model.json").write_text(json.dumps(MODEL))
    running = Daemon("--curve-secret-key", str(keys["server"]["key"]),
                     "--authorized-keys", str(directory / "authorized_keys"),
                     "--policy", str(directory / "policy.json"), "--model", str(directory / "model.json"),
                     "--listen", "tcp://0.0.0.0:*")
    try:
        yield {"endpoint": running.endpoint.replace("0.0.0.0", "127.0.0.1"), "keys": keys}
    finally:
        running.stop()


def connect(scoped: Dict[str, Any], name: str) -> depot.Client:
    keys = scoped["keys"]
    return depot.Client(scoped["endpoint"], server_key=str(keys["server"]["pub"]), key_file=str(keys[name]["key"]),
                        timeout=10)


def note(title: str, owner: str, shared: bool = False) -> Dict[str, Any]:
    return {"entity": "Note", "tempId": title, "values": {"title": title, "owner": owner, "shared": shared}}


def collect(client: depot.Client, method: str) -> Tuple[List[Dict[str, Any]], threading.Condition]:
    """Records every `method` notification `client` receives; wait on the condition for more."""
    received: List[Dict[str, Any]] = []
    arrived = threading.Condition()

    def record(_method: str, params: Any) -> None:
        with arrived:
            received.append(params)
            arrived.notify_all()

    client.on_notification(method, record)
    return received, arrived


def test_export_and_observe_follow_the_scope(scoped: Dict[str, Any]) -> None:
    keys = scoped["keys"]
    with connect(scoped, "alice") as alice, connect(scoped, "bob") as bob:
        heard, arrived = collect(alice, "store/didSave")
        alice.call("store/observe", {"entities": ["Note"]})
        alice.call("store/save", {"inserted": [note("a1", "alice")]})
        bob.call("store/save", {"inserted": [note("b1", "bob")]})
        shared = bob.call("store/save", {"inserted": [note("b2", "bob", shared=True)]})["ids"]
        with arrived:
            assert arrived.wait_for(lambda: len(heard) >= 2, timeout=10), heard
        time.sleep(0.3)
        # Her own insert and bob's shared note; bob's private one sends nothing.
        named = [params["changes"]["Note"]["inserted"] for params in heard]
        assert len(named) == 2 and named[1] == [shared["b2"]], named

    done = subprocess.run([DEPOT, "export", "Note", "--connect", scoped["endpoint"], "--timeout", "10",
                           "--server-key", str(keys["server"]["pub"]), "--key", str(keys["alice"]["key"])],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    titles = sorted(json.loads(line)["title"] for line in done.stdout.splitlines() if line.strip())
    assert titles == ["a1", "b2"]


def test_history_repeats_what_the_observer_heard(scoped: Dict[str, Any]) -> None:
    with connect(scoped, "alice") as alice, connect(scoped, "bob") as bob:
        heard, arrived = collect(alice, "store/didSave")
        alice.call("store/observe", {})
        since = alice.call("store/history", {"since": 0})["latest"]
        ids = bob.call("store/save", {"inserted": [note("h1", "bob", shared=True), note("h2", "bob")]})["ids"]
        bob.call("store/save", {"updated": [{"id": ids["h2"], "values": {"shared": True}}]})
        bob.call("store/save", {"updated": [{"id": ids["h1"], "values": {"shared": False}}]})
        bob.call("store/save", {"deleted": [{"id": ids["h1"]}]})
        with arrived:
            assert arrived.wait_for(lambda: len(heard) >= 3, timeout=10), heard
        time.sleep(0.3)
        history = alice.call("store/history", {"since": since, "limit": 2})
        pages = history["transactions"]
        while history["transactions"]:
            history = alice.call("store/history", {"since": pages[-1]["transaction"], "limit": 2})
            pages += history["transactions"]
        # h1 in, h2 shared (in), h1 unshared (out); its delete is of a note she no longer saw.
        assert [(t["transaction"], t["changes"]) for t in pages] == [
            (p["transaction"], p["changes"]) for p in heard], (pages, heard)
        named = [[c.get(kind, []) for kind in ("inserted", "updated", "deleted")]
                 for c in (t["changes"]["Note"] for t in pages)]
        assert named == [[[ids["h1"]], [], []], [[ids["h2"]], [], []], [[], [], [ids["h1"]]]], named


def test_an_observer_whose_scope_fails_is_told_it_ended(scoped: Dict[str, Any]) -> None:
    with connect(scoped, "dana") as dana, connect(scoped, "ops") as ops:
        ended, arrived = collect(dana, "store/observeDidEnd")
        observer = dana.call("store/observe", {})["observer"]
        # Matching this title against (a+)+b backtracks for far longer than one match may take.
        saved = ops.call("store/save", {"inserted": [note("a" * 27 + "c", "ops")]})
        with arrived:
            assert arrived.wait_for(lambda: len(ended) >= 1, timeout=30), ended
        assert ended[0]["observer"] == observer and ended[0]["reason"] == "error", ended
        assert ended[0]["transaction"] == saved["transaction"] and ended[0]["message"], ended
        with pytest.raises(depot.errors.NotFoundError):
            dana.call("store/unobserve", {"observer": observer})


def test_a_hidden_entity_is_an_unknown_one(scoped: Dict[str, Any]) -> None:
    with connect(scoped, "alice") as alice, connect(scoped, "ops") as ops:
        ops.call("store/save", {"inserted": [{"entity": "Secret", "values": {"code": "hush"}}]})
        assert [e["name"] for e in alice.call("model/get", {})["entities"]] == ["Note"]
        calls = [("store/fetch", lambda name: {"entity": name}),
                 ("store/count", lambda name: {"entity": name}),
                 ("store/get", lambda name: {"ids": [f"{name}/1"]}),
                 ("store/observe", lambda name: {"entities": [name]}),
                 ("results/subscribe", lambda name: {"request": {"entity": name, "sort": [{"key": "code"}]}}),
                 ("store/batchInsert", lambda name: {"entity": name, "objects": [{"code": "x"}]}),
                 ("store/batchUpdate", lambda name: {"entity": name, "values": {"code": "x"}}),
                 ("store/batchDelete", lambda name: {"entity": name})]
        for method, params in calls:
            with pytest.raises(depot.errors.InvalidParamsError) as hidden:
                alice.call(method, params("Secret"))
            with pytest.raises(depot.errors.InvalidParamsError) as unknown:
                alice.call(method, params("Nope"))
            # The same answer, name for name; the list of entities leaves Secret out.
            assert hidden.value.message == unknown.value.message.replace("Nope", "Secret"), method
            assert hidden.value.data == unknown.value.data, method
            assert "Secret" not in unknown.value.message, unknown.value.message
        # The unscoped admin key sees it.
        assert ops.call("store/count", {"entity": "Secret"})["count"] == 1


def _named(changes: Dict[str, Any]) -> List[str]:
    return [i for c in changes.values()
            for i in c.get("inserted", []) + [u["id"] for u in c.get("updated", [])] + c.get("deleted", [])]


def test_look_alike_keys_never_see_each_others_notes(scoped: Dict[str, Any]) -> None:
    names = {"composed": COMPOSED, "decomposed": DECOMPOSED}
    request = {"entity": "Note", "predicate": "shared == NO", "sort": [{"key": "title"}]}
    with connect(scoped, "composed") as composed, connect(scoped, "decomposed") as decomposed:
        clients = {"composed": composed, "decomposed": decomposed}
        heard = {who: collect(client, "store/didSave") for who, client in clients.items()}
        changed = {who: collect(client, "results/didChange") for who, client in clients.items()}
        for client in clients.values():
            client.call("results/subscribe", {"request": request, "include": "all"})
            client.call("store/observe", {"entities": ["Note"], "includeValues": True})
        own: Dict[str, set] = {}
        for who, client in clients.items():
            # Titles that are look-alikes of each other too.
            saved = client.call("store/save", {"inserted": [note("caf\u00e9", names[who]),
                                                            note("cafe\u0301-2", names[who])]})
            own[who] = set(saved["ids"].values())
        time.sleep(0.5)
        for who, client in clients.items():
            other = own["decomposed" if who == "composed" else "composed"]
            fetched = client.call("store/fetch", request)["objects"]
            assert {o["id"] for o in fetched} == own[who], (who, fetched)
            assert all(o["owner"].encode() == names[who].encode() for o in fetched), fetched
            assert client.call("store/count", request)["count"] == 2
            history = client.call("store/history", {"since": 0})["transactions"]
            history_ids = {i for t in history for i in _named(t["changes"])}
            assert other.isdisjoint(history_ids), (who, history)
            saves, _ = heard[who]
            for params in saves:
                assert other.isdisjoint(_named(params["changes"])), (who, params)
                for value in (params.get("objects") or {}).values():
                    assert value["owner"].encode() == names[who].encode(), (who, params)
            deltas, _ = changed[who]
            for params in deltas:
                for change in params.get("objects", []):
                    value = change.get("object")
                    if value is not None:
                        assert value["owner"].encode() == names[who].encode(), (who, params)
