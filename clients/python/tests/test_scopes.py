"""Row-level scopes from Python and the CLI (DESIGN.md §2, docs/scopes.md).

A daemon with a policy: ``member`` keys read their own and the shared notes and
write only their own. ``depot export`` with a member's key writes only what the
member sees, the Python client's ``store/observe`` hears only of it and its
``store/history`` repeats what it heard; an observer whose scope cannot be
evaluated ends with ``store/observeDidEnd``.
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
    {"name": "shared", "type": "boolean", "default": False}]}]}

POLICY = {"roles": {"member": {"base": "write", "entities": {
    "Note": {"read": "owner == $keyName OR shared == YES", "write": "owner == $keyName"}}},
    "matcher": {"base": "read", "entities": {"Note": {"read": "title MATCHES $pattern"}}}}}


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
    keys = {name: generate(directory, name) for name in ("server", "alice", "bob", "ops", "dana")}
    lines = [f"{depot.keys.read_key(str(keys['alice']['pub']))} member alice",
             f"{depot.keys.read_key(str(keys['bob']['pub']))} member bob",
             f"{depot.keys.read_key(str(keys['ops']['pub']))} admin ops",
             f"{depot.keys.read_key(str(keys['dana']['pub']))} matcher dana pattern=(a+)+b"]
    (directory / "authorized_keys").write_text("\n".join(lines) + "\n")
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
