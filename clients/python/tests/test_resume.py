"""Resumed subscriptions (DESIGN.md §7, Resuming) from the Python client: after a daemon restart
and random saves while away, ``FetchedResults.resume_subscription`` rebuilds the results from the
rows the daemon names, and they equal a fresh subscription; a digest that differs falls back to
reading the results in full.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List

import depot
from conftest import TEST_MODEL, Daemon

REQUEST = {"entity": "Team", "sort": [{"key": "qualifyingZone"}, {"key": "wins", "ascending": False},
                                      {"key": "teamName"}]}
ZONES = ["Africa", "Asia", "Europe", "Oceania"]


def random_saves(client: depot.Client, rng: random.Random, ids: List[str], steps: int) -> int:
    """``steps`` random saves of Teams; returns the last transaction."""
    last = 0
    for step in range(steps):
        roll = rng.random()
        if roll < 0.3 or len(ids) < 5:
            result = client.save(inserted=[{"entity": "Team", "values": {
                "teamName": f"Resume {step}-{rng.randrange(10**6)}", "qualifyingZone": rng.choice(ZONES),
                "wins": rng.randint(0, 9)}}])
            ids.extend(i for i in result["versions"] if i not in ids)
        elif roll < 0.8:
            key = rng.choice(["wins", "qualifyingZone"])
            value = rng.randint(0, 9) if key == "wins" else rng.choice(ZONES)
            result = client.save(updated=[{"id": rng.choice(ids), "values": {key: value}}])
        else:
            result = client.save(deleted=[{"id": ids.pop(rng.randrange(len(ids)))}])
        last = result["transaction"] or last
    return last


def fresh(client: depot.Client, request: Dict[str, Any], **options: Any) -> Any:
    with client.subscribe(request, include="all", **options) as results:
        return results.as_sections(), results.ids


def test_resume_after_a_restart_equals_a_fresh_subscription() -> None:
    first = Daemon()
    rng = random.Random(36)
    ids: List[str] = []
    try:
        client = first.client()
        client.call("model/define", TEST_MODEL)
        random_saves(client, rng, ids, 30)
        results = client.subscribe(REQUEST, section_key_path="qualifyingZone")
        groups = client.subscribe({"entity": "Team", "sort": [{"key": "qualifyingZone"}]},
                                  group_by=["qualifyingZone"],
                                  aggregates=[{"name": "wins", "function": "sum", "key": "wins"}])
        client.close()
        first.stop(keep_data=True)
        # Away: the daemon restarts on its data, and others save.
        second = Daemon(data_dir=first.data_dir)
        try:
            writer = second.client()
            random_saves(writer, rng, ids, 12)
            reconnected = second.client()
            assert results.resume_subscription(reconnected, timeout=20)
            assert results.resume_count == 1
            assert (results.as_sections(), results.ids) == fresh(reconnected, REQUEST,
                                                                 section_key_path="qualifyingZone")
            # Grouped: after deletes the groups may be read in full; after inserts and value updates
            # every changed member's group is known, so the next resume names only those groups.
            grouping: Dict[str, Any] = {"group_by": ["qualifyingZone"],
                                        "aggregates": [{"name": "wins", "function": "sum", "key": "wins"}]}
            by_zone = {"entity": "Team", "sort": [{"key": "qualifyingZone"}]}
            groups.resume_subscription(reconnected, timeout=20)
            assert groups.ids == fresh(reconnected, by_zone, **grouping)[1]
            writer.save(inserted=[{"entity": "Team", "values": {"teamName": "Late", "qualifyingZone": "Asia",
                                                                 "wins": 3}}])
            writer.save(updated=[{"id": ids[0], "values": {"wins": 7}}])
            assert groups.resume_subscription(reconnected, timeout=20)
            with reconnected.subscribe(by_zone, include="all", **grouping) as now:
                assert groups.ids == now.ids
                assert groups.fetched_objects == now.fetched_objects
            # Live again: later saves arrive as deltas on the resumed subscription.
            last = writer.save(updated=[{"id": ids[1], "values": {"wins": 9}}])["transaction"]
            assert results.wait_for_transaction(last, timeout=10)
            assert results.as_sections() == fresh(reconnected, REQUEST, section_key_path="qualifyingZone")[0]

            # A held copy gone wrong: the digest differs, the results are read in full.
            # (Swapped once the deltas of the saves arrived: a later delta would not fit, and resync.)
            held = results.state
            assert results.wait_for_transaction(random_saves(writer, rng, ids, 3), timeout=10)
            state = results.state
            swapped = [depot.Section(s.name, s.index_title, list(reversed(s.ids))) for s in state.sections]
            results._set_state(depot.ResultsState(swapped, state.values, state.seq, held.transaction))
            assert not results.resume_subscription(reconnected, timeout=20)
            assert results.as_sections() == fresh(reconnected, REQUEST, section_key_path="qualifyingZone")[0]
            results.close()
            groups.close()
            for opened in (writer, reconnected):
                opened.close()
        finally:
            second.stop()
    finally:
        first.stop()


def test_results_digest_is_sha256_of_ids_joined_by_newline() -> None:
    assert depot.results_digest([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert depot.results_digest(["abc"]) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert depot.results_digest(["Team/1", "Team/2"]) == depot.results_digest(["Team/1\nTeam/2"])


def test_depot_watch_resumes_on_a_new_session() -> None:
    """`depot watch` keeps its table across a daemon restart: the new session resumes (a
    `reload` event with `resumed: true`) and the table equals a fresh subscription."""
    import json
    import queue
    import shutil
    import socket
    import subprocess
    import tempfile
    import threading

    from conftest import DEPOT, DEPOTD

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    data = tempfile.mkdtemp(prefix="depot-py-watch-")

    def start(listen: str = endpoint) -> Any:
        process = subprocess.Popen([DEPOTD, "--data-dir", data, "--listen", listen, "--log-level", "warning",
                                    "--heartbeat-interval", "1"], stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("depotd listening on "), line
        process.endpoint = line.split()[-1]  # type: ignore[attr-defined]
        threading.Thread(target=process.stdout.read, daemon=True).start()
        return process

    first = start()
    watch: Any = None
    aside: Any = None
    second: Any = None
    try:
        rng = random.Random(5)
        ids: List[str] = []
        with depot.Client(endpoint, timeout=20) as client:
            client.call("model/define", TEST_MODEL)
            random_saves(client, rng, ids, 20)
        watch = subprocess.Popen([DEPOT, "watch", "Team", "--sort", "qualifyingZone", "--sort", "teamName",
                                  "--section", "qualifyingZone", "--json", "--connect", endpoint],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: "queue.Queue[str]" = queue.Queue()

        def pump() -> None:
            for line in watch.stdout:
                lines.put(line)
        threading.Thread(target=pump, daemon=True).start()
        assert json.loads(lines.get(timeout=20))["event"] == "snapshot"
        first.terminate()
        first.wait(15)
        # Saves while the watcher is away, by a daemon on another port (the watcher cannot reach it).
        aside = start("tcp://127.0.0.1:*")
        with depot.Client(aside.endpoint, timeout=20) as client:
            last = random_saves(client, rng, ids, 8)
        aside.terminate()
        aside.wait(15)
        second = start()
        with depot.Client(endpoint, timeout=20) as client:
            while True:
                event = json.loads(lines.get(timeout=30))
                if event["event"] == "reload":
                    break
            assert event.get("resumed") is True
            assert event["transaction"] == last
            fresh_request = {"entity": "Team", "sort": [{"key": "qualifyingZone"}, {"key": "teamName"}]}
            with client.subscribe(fresh_request, section_key_path="qualifyingZone", include="all") as now:
                expected = [(s.name, s.ids) for s in now.sections]
            assert [(s["name"], [o["id"] for o in s["objects"]]) for s in event["sections"]] == expected
    finally:
        if watch is not None:
            watch.kill()
            watch.wait(5)
        for process in (first, aside, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(15)
        shutil.rmtree(data, ignore_errors=True)
