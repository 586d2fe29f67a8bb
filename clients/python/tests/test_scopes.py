"""Row-level scopes from Python and the CLI (DESIGN.md §2, docs/scopes.md).

A daemon with a policy: ``member`` keys read their own and the shared notes and
write only their own. ``depot export`` with a member's key writes only what the
member sees, and the Python client's ``store/observe`` hears only of it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import threading
import time
from typing import Any, Dict, Iterator, List

import pytest

import depot
from conftest import DEPOT, Daemon

MODEL = {"entities": [{"name": "Note", "attributes": [
    {"name": "title", "type": "string"}, {"name": "owner", "type": "string"},
    {"name": "shared", "type": "boolean", "default": False}]}]}

POLICY = {"roles": {"member": {"base": "write", "entities": {
    "Note": {"read": "owner == $keyName OR shared == YES", "write": "owner == $keyName"}}}}}


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
    keys = {name: generate(directory, name) for name in ("server", "alice", "bob", "ops")}
    lines = [f"{depot.keys.read_key(str(keys['alice']['pub']))} member alice",
             f"{depot.keys.read_key(str(keys['bob']['pub']))} member bob",
             f"{depot.keys.read_key(str(keys['ops']['pub']))} admin ops"]
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


def test_export_and_observe_follow_the_scope(scoped: Dict[str, Any]) -> None:
    keys = scoped["keys"]
    with connect(scoped, "alice") as alice, connect(scoped, "bob") as bob:
        heard: List[Dict[str, Any]] = []
        arrived = threading.Condition()

        def record(method: str, params: Any) -> None:
            with arrived:
                heard.append(params)
                arrived.notify_all()

        alice.on_notification("store/didSave", record)
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
