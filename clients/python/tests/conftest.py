"""Fixtures: a real depotd per test module on a temp dir and a loopback port, clients that record traffic.

``DEPOTD`` and ``DEPOT`` name the built binaries (``make test`` sets them);
otherwise ``.build/debug/`` of the repository is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
sys.path.insert(0, str(HERE.parent))  # The package under test, even when another checkout is pip-installed.

import depot  # noqa: E402

FIXTURES = REPO / "Tests" / "Fixtures"
DEPOTD = os.environ.get("DEPOTD", str(REPO / ".build" / "debug" / "depotd"))
DEPOT = os.environ.get("DEPOT", str(REPO / ".build" / "debug" / "depot"))
#: ``postgresql://USER@HOST:PORT/DB`` to run every daemon on PostgreSQL (a schema of its own each,
#: so each is a cluster of one); unset for the embedded SQLite store. ``make test`` runs both.
STORE = os.environ.get("DEPOT_TEST_STORE", "")

WORLDCUP_MODEL = json.loads((REPO / "Examples" / "worldcup-model.json").read_text())

#: The tests' model: the World Cup entities, a deny rule to trip, and the catalogue's Package.
TEST_MODEL = {"entities": WORLDCUP_MODEL["entities"] + [
    {"name": "Owner", "attributes": [{"name": "name", "type": "string"}],
     "relationships": [{"name": "pets", "destination": "Pet", "toMany": True, "inverse": "owner",
                        "deleteRule": "deny"}]},
    {"name": "Pet", "attributes": [{"name": "name", "type": "string"}],
     "relationships": [{"name": "owner", "destination": "Owner", "inverse": "pets"}]},
    {"name": "Package",
     "attributes": [{"name": "name", "type": "string"}, {"name": "release", "type": "string"},
                    {"name": "downloads", "type": "integer", "default": 0},
                    {"name": "summary", "type": "string", "optional": True}],
     "uniquenessConstraints": [["name", "release"]]},
]}


class TrafficLog:
    """Every JSON-RPC message the test clients sent and received, per connection, in wire order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.connections: List[List[Tuple[str, Any]]] = []

    def recorder(self) -> Callable[[str, Any], None]:
        """A recorder for one new connection."""
        log: List[Tuple[str, Any]] = []
        with self._lock:
            self.connections.append(log)

        def record(direction: str, message: Any) -> None:
            with self._lock:
                log.append((direction, message))
        return record

    def message_count(self) -> int:
        with self._lock:
            return sum(len(c) for c in self.connections)


TRAFFIC = TrafficLog()


class Daemon:
    """A running depotd on a temporary data directory, listening on tcp://127.0.0.1:*."""

    def __init__(self, *extra: str, store: Optional[str] = None, data_dir: Optional[str] = None) -> None:
        """Starts depotd; ``store`` overrides ``--store`` (a cluster's URL), ``data_dir`` reuses a directory."""
        if not os.path.exists(DEPOTD):
            pytest.skip(f"depotd not built at {DEPOTD}: run `swift build` or set DEPOTD")
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="depot-py-")
        if store is None and STORE:
            # A schema of its own, named after the data directory's whole path (a restart finds its cluster
            # again; directories with one name, such as the CLI's ./depot-data in different places, do not meet).
            digest = hashlib.sha256(os.path.abspath(self.data_dir).encode()).hexdigest()[:20]
            store = f"{STORE}?schema=t_{digest}"
        self.store = store
        store_args = ["--store", store] if store else []
        self.process = subprocess.Popen(
            [DEPOTD, "--data-dir", self.data_dir, "--listen", "tcp://127.0.0.1:*", "--log-level", "warning",
             *store_args, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("depotd listening on "):
            self.process.kill()
            raise RuntimeError(f"depotd did not start: {line!r} {self.process.stderr.read()}")
        #: The TCP endpoint it listens on.
        self.endpoint = line.split()[-1]
        # Keep draining stdout so the daemon never blocks on a full pipe.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

    def client(self, **options: Any) -> depot.Client:
        """A recorded client of this daemon."""
        options.setdefault("recorder", TRAFFIC.recorder())
        options.setdefault("timeout", 20.0)
        return depot.Client(self.endpoint, **options)

    def kill(self) -> None:
        """kill -9: the daemon dies mid-whatever, its data directory stays (start another on it)."""
        self.process.kill()
        self.process.wait(5)

    def stop(self, keep_data: bool = False) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if not keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    """One depotd per test module, with :data:`TEST_MODEL` defined."""
    running = Daemon()
    try:
        with running.client() as client:
            client.call("model/define", TEST_MODEL)
        yield running
    finally:
        running.stop()


@pytest.fixture()
def client(daemon: Daemon) -> Iterator[depot.Client]:
    """A recorded client of the module's daemon."""
    with daemon.client() as connected:
        yield connected


@pytest.fixture(scope="session")
def traffic() -> TrafficLog:
    """The traffic recorded by every test client so far."""
    return TRAFFIC


def server_lacks(client: depot.Client, method: str, params: Optional[Dict[str, Any]] = None) -> bool:
    """Whether the daemon answers ``method`` with -32601 (method not found)."""
    try:
        client.call(method, params or {})
    except depot.MethodNotFoundError:
        return True
    except depot.DepotError:
        return False
    return False


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    """Runs test_proto last, so it validates the traffic of every other suite."""
    items.sort(key=lambda item: 1 if item.fspath.basename == "test_proto.py" else 0)
