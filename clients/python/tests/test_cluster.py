"""Several depotd on one PostgreSQL (DESIGN.md section 11), real processes and a real server.

Every subscription, on every daemon, is checked by the delta oracle: the deltas it received, applied
in seq order to its first state, give exactly a fresh fetch on that daemon, and every daemon agrees.
Runs when ``DEPOT_TEST_STORE`` names a server (``make test`` starts one with scripts/postgres.sh).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from contextlib import closing
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import depot
from conftest import REPO, STORE, TEST_MODEL, Daemon
from depot.results import ResultsState

pytestmark = pytest.mark.skipif(not STORE, reason="needs DEPOT_TEST_STORE=postgresql://… (make test sets it)")

REQUEST = {"entity": "Team", "sort": [{"key": "qualifyingZone"}, {"key": "wins", "ascending": False},
                                      {"key": "teamName"}]}
ZONES = ["Africa", "Asia", "Europe", "Oceania", "South America"]


def start_cluster(count: int, url: str = "") -> Tuple[str, List[Daemon]]:
    """``count`` daemons on one fresh schema, the test model defined through the first."""
    store = f"{url or STORE}?schema=c_{uuid.uuid4().hex[:12]}"
    daemons = [Daemon(store=store)]
    with daemons[0].client() as client:
        client.call("model/define", TEST_MODEL)
    daemons += [Daemon(store=store) for _ in range(count - 1)]
    return store, daemons


@pytest.fixture()
def cluster() -> Iterator[List[Daemon]]:
    _, daemons = start_cluster(3)
    try:
        yield daemons
    finally:
        for running in daemons:
            running.stop()


class Oracle:
    """A subscription's own mirror: its first state, then every delta applied strictly in seq order."""

    def __init__(self, client: depot.Client, request: Dict[str, Any] = REQUEST,
                 section: Optional[str] = "qualifyingZone") -> None:
        self.client = client
        self.request = request
        self.results = client.subscribe(request, section_key_path=section, include="all")
        self.state = self.results.state
        self.seqs: List[int] = []
        self.failures: List[str] = []
        self.results.on_change(self._applied)
        client.on_notification("results/didInvalidate", lambda m, p: self.failures.append(f"invalidated: {p}"))

    def _applied(self, results: Any, change: Dict[str, Any]) -> None:
        self.seqs.append(change["seq"])
        try:
            self.state = self.state.applying(change)
        except Exception as error:  # The oracle's own apply must never fail.
            self.failures.append(f"delta {change['seq']} does not apply: {error}")

    def check(self, transaction: int) -> None:
        assert self.results.wait_for_transaction(transaction, timeout=20), f"no delta for transaction {transaction}"
        assert not self.failures, self.failures
        assert self.seqs == list(range(self.seqs[0], self.seqs[0] + len(self.seqs))), "seq without gaps"
        fresh = self.client.fetch(self.request)["objects"]
        assert self.view() == fresh, "deltas applied == a fresh fetch"

    def view(self) -> List[Dict[str, Any]]:
        """The objects the deltas applied so far give, in order."""
        return [self.state.values[i] for i in self.state.ids]

    def settle(self) -> None:
        """Waits until the deltas give a fresh fetch (a daemon that followed every save publishes
        them after its fetch may already see them), then checks the seqs and the deltas' health."""
        wait_until(lambda: self.view() == self.client.fetch(self.request)["objects"],
                   f"deltas of {self.request} to give a fresh fetch")
        assert not self.failures, self.failures
        assert self.seqs == list(range(self.seqs[0], self.seqs[0] + len(self.seqs))) if self.seqs else True


def random_save(rng: random.Random, ids: List[str], tag: str) -> Dict[str, Any]:
    inserted: List[Any] = []
    updated: List[Any] = []
    deleted: List[Any] = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.45 or len(ids) < 3:
            inserted.append({"entity": "Team", "values": {
                "teamName": f"{tag}-{rng.randrange(10**9)}", "qualifyingZone": rng.choice(ZONES),
                "wins": rng.randint(0, 9)}})
        elif roll < 0.85:
            target = rng.choice(ids)
            if all(u["id"] != target for u in updated):
                key = rng.choice(["wins", "qualifyingZone"])
                updated.append({"id": target, "values": {key: rng.randint(0, 9) if key == "wins"
                                                         else rng.choice(ZONES)}})
        else:
            target = ids.pop(rng.randrange(len(ids)))
            deleted.append({"id": target})
    gone = {d["id"] for d in deleted}
    return {"inserted": inserted, "updated": [u for u in updated if u["id"] not in gone], "deleted": deleted}


def saver(daemon: Daemon, seed: int, steps: int, ids: List[str], lock: threading.Lock,
          last: List[int], errors: List[str]) -> None:
    rng = random.Random(seed)
    with daemon.client() as client:
        for step in range(steps):
            with lock:
                params = random_save(rng, ids, f"d{seed}")
            try:
                result = client.call("store/save", {**params, "mergePolicy": "objectTrump"})
            except depot.DepotError as error:
                # An update or delete of an object another daemon deleted meanwhile: refused, as on one daemon.
                if "does not exist" not in str(error):
                    errors.append(f"step {step}: {error}")
                continue
            with lock:
                gone = {d["id"] for d in params["deleted"]}
                ids.extend(i for i in result["versions"] if i not in ids and i not in gone)
                last[0] = max(last[0], result["transaction"] or 0)


def test_random_transactions_through_three_daemons_give_every_subscription_exact_deltas(
        cluster: List[Daemon]) -> None:
    clients = [d.client() for d in cluster]
    try:
        oracles = [Oracle(c) for c in clients]
        ids: List[str] = []
        lock = threading.Lock()
        last = [0]
        errors: List[str] = []
        # Round robin first (each save on the next daemon), then all three daemons at once.
        for step in range(30):
            saver(cluster[step % 3], 1000 + step, 1, ids, lock, last, errors)
        threads = [threading.Thread(target=saver, args=(d, i, 25, ids, lock, last, errors))
                   for i, d in enumerate(cluster)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert last[0] > 30
        for oracle in oracles:
            oracle.check(last[0])
        tables = [[(o["id"], o["wins"], o["qualifyingZone"]) for o in c.fetch(REQUEST)["objects"]]
                  for c in clients]
        assert tables[0] == tables[1] == tables[2], "every daemon serves the same objects"
        histories = [c.call("store/history", {"since": 0, "limit": 10000}) for c in clients]
        assert histories[0]["transactions"], "history holds the transactions"
        assert histories[0]["transactions"] == histories[1]["transactions"] == histories[2]["transactions"]
        assert histories[0]["latest"] == histories[1]["latest"] == histories[2]["latest"] == last[0]
    finally:
        for client in clients:
            client.close()


# Requests whose sets follow from a commit's row images alone (plain, filtered, sectioned), and a
# window, which reads the store.
IMAGED = [(REQUEST, None),
          ({"entity": "Team", "predicate": "wins >= 5", "sort": [{"key": "wins"}, {"key": "teamName"}]}, None),
          (REQUEST, "qualifyingZone")]
WINDOW = {"entity": "Team", "sort": [{"key": "wins", "ascending": False}, {"key": "teamName"}],
          "offset": 2, "limit": 6}


def store_reads(client: depot.Client) -> Dict[str, int]:
    """``server/stats`` ``storeReads``: what publishing commits read of the store."""
    return client.call("server/stats", {}).get("storeReads") or {}


def test_followers_publish_from_row_images_the_deltas_of_the_committing_daemon() -> None:
    """Three daemons, each with subscribers to the same plain, filtered and sectioned requests. Saves
    one at a time, each through the next daemon: every daemon, committing or following, publishes
    them from the commits' row images (``storeReads.snapshot`` stays where it was, while ``commits``
    grows), and every subscription's deltas give a fresh fetch, the same on every daemon. Then a
    window joins on every daemon and all three daemons save at once (group commits, whose continued
    entries carry no images and are published from a snapshot): every subscription still follows
    exactly, every daemon agrees, and the histories are equal (one order)."""
    _, daemons = start_cluster(3)
    clients = [d.client() for d in daemons]
    try:
        oracles = [[Oracle(c, request, section) for request, section in IMAGED] for c in clients]
        ids: List[str] = []
        lock = threading.Lock()
        last = [0]
        errors: List[str] = []

        def round_robin(first_seed: int, steps: int) -> None:
            for step in range(steps):
                saver(daemons[step % 3], first_seed + step, 1, ids, lock, last, errors)
            for client in clients:
                wait_until(lambda: client.call("store/history", {"since": 0, "limit": 1})["latest"] >= last[0],
                           "every daemon to follow the last save")
            for row in oracles:
                for oracle in row:
                    oracle.settle()

        round_robin(3000, 6)  # Every lane has followed a commit under the model (no snapshot owed).
        before = [store_reads(c) for c in clients]
        round_robin(3100, 30)
        after = [store_reads(c) for c in clients]
        assert not errors, errors
        for index, (was, now) in enumerate(zip(before, after)):
            assert now.get("commits", 0) >= was.get("commits", 0) + 20, f"daemon {index} published: {was} {now}"
            assert now.get("snapshot", 0) == was.get("snapshot", 0), f"daemon {index} read no snapshot: {was} {now}"
            assert now.get("changedRows", 0) == was.get("changedRows", 0), f"daemon {index}: {was} {now}"
        for column in range(len(IMAGED)):
            assert oracles[0][column].view() == oracles[1][column].view() == oracles[2][column].view()

        for row, client in zip(oracles, clients):
            row.append(Oracle(client, WINDOW, None))
        threads = [threading.Thread(target=saver, args=(d, 3200 + i, 20, ids, lock, last, errors))
                   for i, d in enumerate(daemons)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        round_robin(3300, 3)
        assert not errors, errors
        for column in range(len(IMAGED) + 1):
            views = [row[column].view() for row in oracles]
            assert views[0] == views[1] == views[2], f"every daemon's deltas agree ({oracles[0][column].request})"
        histories = [c.call("store/history", {"since": 0, "limit": 10000})["transactions"] for c in clients]
        assert histories[0] == histories[1] == histories[2], "one order everywhere"
        assert len(histories[0]) >= 40
    finally:
        for client in clients:
            client.close()
        for running in daemons:
            running.stop()


def test_did_save_reaches_observers_on_the_other_daemons(cluster: List[Daemon]) -> None:
    with cluster[0].client() as writer, cluster[1].client() as watcher, cluster[2].client() as other:
        seen: List[Any] = []
        arrived = threading.Event()

        def record(method: str, params: Any) -> None:
            seen.append(params)
            arrived.set()

        watcher.on_notification("store/didSave", record)
        watcher.call("store/observe", {"entities": ["Team"]})
        result = writer.save(inserted=[{"entity": "Team", "values": {"teamName": "Observed", "wins": 1, "qualifyingZone": "Asia"}}])
        assert arrived.wait(10), "store/didSave from another daemon's save"
        (new_id,) = result["versions"].keys()
        assert seen[0]["transaction"] == result["transaction"]
        assert new_id in seen[0]["changes"]["Team"]["inserted"]
        # Reads on a third daemon see it once its delta has been published there.
        deadline = time.monotonic() + 10
        # An id it does not have yet comes back as null in `objects`.
        while not any(other.call("store/get", {"ids": [new_id]}).get("objects") or []) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert other.call("store/get", {"ids": [new_id]})["objects"][0]["teamName"] == "Observed"


def count(client: depot.Client) -> int:
    return int(client.call("store/count", {"entity": "Package"})["count"])


def test_a_save_resent_to_other_daemons_is_answered_as_before_and_applied_once(cluster: List[Daemon]) -> None:
    """saveId across the cluster: whichever daemon a save is resent to, even one that has not
    followed the log yet, or several at once, it is applied once and answered with the first answer."""
    team = {"entity": "Team", "tempId": "t", "values": {"teamName": "Resent", "qualifyingZone": "Asia"}}
    clients = [daemon.client() for daemon in cluster]
    try:
        first = clients[0].save(inserted=[team], save_id="cluster-resent")
        for client in clients[1:]:  # at once after the commit: they may not have followed yet
            assert client.save(inserted=[team], save_id="cluster-resent") == first
        # Three daemons sent one new save id at the same moment.
        racing = {**team, "values": {"teamName": "Raced", "qualifyingZone": "Asia"}}
        answers: List[Any] = [None] * len(clients)

        def send(index: int) -> None:
            answers[index] = clients[index].save(inserted=[racing], save_id="cluster-raced")

        threads = [threading.Thread(target=send, args=(index,)) for index in range(len(clients))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert answers[0] is not None and all(answer == answers[0] for answer in answers), answers
        for client in clients:
            deadline = time.monotonic() + 10
            predicate = {"entity": "Team", "predicate": "teamName IN %@", "arguments": [["Resent", "Raced"]]}
            while client.call("store/count", predicate)["count"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.call("store/count", predicate)["count"] == 2, "each save once, on every daemon"
    finally:
        for client in clients:
            client.close()


def test_kill_9_of_a_daemon_mid_batch_loses_nothing_and_stalls_no_one() -> None:
    store, daemons = start_cluster(2)
    survivor, victim = daemons
    try:
        with survivor.client() as client:
            objects = [{"name": f"pkg{i}", "release": "1.0", "downloads": i} for i in range(40_000)]
            victim_client = victim.client(timeout=60)
            pending = victim_client.request("store/batchInsert", {"entity": "Package", "objects": objects})
            time.sleep(0.3)
            victim.kill()
            victim_client.close()
            # The survivor goes on committing while the victim is dead (its lock died with it).
            started = time.monotonic()
            for i in range(20):
                client.save(inserted=[{"entity": "Package", "values": {"name": f"after{i}", "release": "1"}}])
            assert time.monotonic() - started < 10, "the survivor stalled"
            del pending
            # The victim restarts on its directory and catches up from its position.
            restarted = Daemon(store=store, data_dir=victim.data_dir)
            daemons[1] = restarted
            with restarted.client() as again:
                expected = count(client)
                assert expected in (20, 40_020), f"the batch is all or nothing, got {expected}"
                deadline = time.monotonic() + 20
                while count(again) != expected and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert count(again) == expected
                assert (again.call("store/history", {"since": 0})["transactions"]
                        == client.call("store/history", {"since": 0})["transactions"])
    finally:
        for running in daemons:
            running.stop()


@pytest.fixture()
def own_postgres() -> Iterator[str]:
    """A PostgreSQL of this test's own, which it stops and starts."""
    directory = tempfile.mkdtemp(prefix="depot-pg-")
    script = str(REPO / "scripts" / "postgres.sh")
    url = subprocess.run([script, "start", directory], check=True, capture_output=True, text=True).stdout.split()[-1]
    try:
        yield directory
    finally:
        subprocess.run([script, "stop", directory], capture_output=True)


def test_postgres_stopped_and_started_under_load(own_postgres: str) -> None:
    script = str(REPO / "scripts" / "postgres.sh")
    url = subprocess.run([script, "url", own_postgres], check=True, capture_output=True, text=True).stdout.strip()
    _, daemons = start_cluster(2, url)
    try:
        with daemons[0].client() as writer, daemons[1].client() as reader:
            oracle = Oracle(reader)
            first = writer.save(inserted=[{"entity": "Team", "values": {"teamName": "Before", "wins": 1, "qualifyingZone": "Asia"}}])
            oracle.check(first["transaction"])
            subprocess.run([script, "stop", own_postgres], check=True, capture_output=True)
            started = time.monotonic()
            with pytest.raises(depot.InternalError) as refused:
                writer.save(inserted=[{"entity": "Team", "values": {"teamName": "While down", "wins": 2, "qualifyingZone": "Asia"}}])
            assert time.monotonic() - started < 15, "a clear error, not a hang"
            assert "PostgreSQL" in str(refused.value)
            # Reads go on from the replica meanwhile.
            assert [o["teamName"] for o in reader.fetch(REQUEST)["objects"]] == ["Before"]
            subprocess.run([script, "start", own_postgres], check=True, capture_output=True)
            deadline = time.monotonic() + 30
            while True:
                try:
                    after = writer.save(inserted=[{"entity": "Team", "values": {"teamName": "After", "wins": 3, "qualifyingZone": "Asia"}}])
                    break
                except depot.InternalError:
                    assert time.monotonic() < deadline, "the daemon did not reconnect"
                    time.sleep(0.2)
            oracle.check(after["transaction"])
            assert sorted(o["teamName"] for o in reader.fetch(REQUEST)["objects"]) == ["After", "Before"]
    finally:
        for running in daemons:
            running.stop()


def test_model_changes_many_to_many_pairs_and_batches_reach_every_daemon(cluster: List[Daemon]) -> None:
    first, second, third = (d.client() for d in cluster)
    try:
        # A model change through one daemon; the others migrate from the log.
        first.call("model/define", {"entities": [
            {"name": "Post", "attributes": [{"name": "title", "type": "string"}],
             "relationships": [{"name": "tags", "destination": "Tag", "toMany": True, "inverse": "posts"}]},
            {"name": "Tag", "attributes": [{"name": "name", "type": "string"}],
             "relationships": [{"name": "posts", "destination": "Post", "toMany": True, "inverse": "tags"}]},
        ]})
        saved = second.save(inserted=[
            {"entity": "Tag", "tempId": "a", "values": {"name": "a"}},
            {"entity": "Tag", "tempId": "b", "values": {"name": "b"}},
            {"entity": "Post", "tempId": "p", "values": {"title": "hello", "tags": ["a", "b"]}},
        ])
        post, a, b = saved["ids"]["p"], saved["ids"]["a"], saved["ids"]["b"]
        third.save(updated=[{"id": post, "values": {"tags": depot.members(remove=[a])}}])
        batch = first.call("store/batchInsert", {"entity": "Tag", "objects": [{"name": f"t{i}"} for i in range(500)]})
        first.call("store/batchUpdate", {"entity": "Tag", "predicate": "name BEGINSWITH 't1'",
                                         "values": {"name": "renamed"}})
        first.call("store/batchDelete", {"entity": "Tag", "predicate": "name BEGINSWITH 't2'"})
        latest = first.call("store/history", {"since": 0, "limit": 1})["latest"]
        assert latest == batch["transaction"] + 2
        views = []
        for client in (first, second, third):
            deadline = time.monotonic() + 10
            while client.call("store/history", {"since": 0, "limit": 1})["latest"] < latest:
                assert time.monotonic() < deadline, "a daemon did not follow"
                time.sleep(0.05)
            posts = client.fetch({"entity": "Post", "properties": ["title", "tags"]})["objects"]
            tags = client.fetch({"entity": "Tag", "sort": [{"key": "name"}], "properties": ["name", "posts"]})
            views.append((posts, tags["objects"]))
        assert views[0] == views[1] == views[2], "every daemon serves the same pairs and rows"
        posts, tags = views[0]
        assert posts[0]["tags"] == [b], "the pair removed through another daemon is gone everywhere"
        assert sum(1 for t in tags if t["name"] == "renamed") == 111
        assert not any(t["name"].startswith("t2") for t in tags)
        assert len(tags) == 2 + 500 - 111
    finally:
        for client in (first, second, third):
            client.close()


def test_a_migration_through_one_daemon_is_a_transaction_every_daemon_publishes() -> None:
    """DESIGN.md §7, Across a migration, on a cluster: the migration is a numbered entry of the log;
    each daemon's subscriptions get the rows it changed as updates in that transaction's
    notification, a request naming a renamed key ends with ``reason: "model"``, every daemon's
    history holds it under the same number, and a daemon that joins later from the cluster's
    tables numbers after it."""
    memo = {"name": "Memo", "attributes": [{"name": "title", "type": "string"},
                                           {"name": "n", "type": "integer", "default": 0}]}
    store, cluster = start_cluster(3)
    clients = [d.client() for d in cluster]
    try:
        clients[0].call("model/define", {"entities": [memo]})
        saved = clients[0].save(inserted=[{"entity": "Memo", "values": {"title": t}} for t in ("b", "a", "c")])
        sorted_by_title, filtered_by_title = [], []
        for client in clients[1:]:
            deadline = time.monotonic() + 10
            while client.call("store/history", {"since": 0, "limit": 1})["latest"] < saved["transaction"]:
                assert time.monotonic() < deadline, "a daemon did not follow"
                time.sleep(0.05)
            sorted_by_title.append(client.subscribe({"entity": "Memo", "sort": [{"key": "title"}]}, include="all"))
            filtered_by_title.append(client.subscribe({"entity": "Memo", "predicate": "title != 'x'", "sort": [{"key": "n"}]}, include="all"))
        renamed = {**memo, "attributes": [{"name": "heading", "type": "string", "renamedFrom": "title"},
                                          {"name": "n", "type": "integer", "default": 0},
                                          {"name": "stars", "type": "integer", "default": 5}]}
        defined = clients[0].call("model/define", {"entities": [renamed]})
        assert defined["transaction"] == saved["transaction"] + 1, "a migration is the cluster's next transaction"
        for client, ended in zip(clients[1:], sorted_by_title):
            deadline = time.monotonic() + 10
            while ended.ended is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert ended.ended == "model", "a sort by the renamed key ends on every daemon"
        for client, live in zip(clients[1:], filtered_by_title):
            # The predicate named the renamed key too: it ends as well.
            deadline = time.monotonic() + 10
            while live.ended is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert live.ended == "model"
        plain = []
        for client in clients[1:]:
            plain.append(client.subscribe({"entity": "Memo", "sort": [{"key": "heading"}]}, include="all"))
        again = clients[0].call("model/define", {"entities": [
            {**renamed, "attributes": renamed["attributes"] + [{"name": "rank", "type": "integer", "default": 2}]}]})
        for client, live in zip(clients[1:], plain):
            assert live.wait_for_transaction(again["transaction"], timeout=20), "the migration's own notification"
            assert [o["heading"] for o in live.fetched_objects] == ["a", "b", "c"]
            assert all(o["rank"] == 2 and o["stars"] == 5 for o in live.fetched_objects)
            fresh = client.fetch({"entity": "Memo", "sort": [{"key": "heading"}]})["objects"]
            assert live.fetched_objects == fresh, "deltas applied == a fresh fetch"
        histories = [c.call("store/history", {"since": saved["transaction"]})["transactions"] for c in clients]
        assert [t["transaction"] for t in histories[0]] == [defined["transaction"], again["transaction"]]
        assert all(t["changes"] == {} for t in histories[0])
        assert histories[1] == histories[0] and histories[2] == histories[0], "the same history on every daemon"
        for live in sorted_by_title + filtered_by_title + plain:
            live.close()
        # A daemon that joins now starts after the migration (the snapshot's history number is the
        # newest numbered entry's) and numbers its first save after it.
        cluster.append(Daemon(store=store))
        joined = cluster[-1].client()
        clients.append(joined)
        assert joined.call("store/history", {"since": again["transaction"]})["latest"] == again["transaction"]
        assert joined.fetch({"entity": "Memo", "sort": [{"key": "heading"}]})["objects"] == fresh
        after = joined.save(inserted=[{"entity": "Memo", "values": {"heading": "d"}}])
        assert after["transaction"] == again["transaction"] + 1
    finally:
        for client in clients:
            client.close()
        for running in cluster:
            running.stop()


def shadow_rows(daemon: Daemon) -> List[Tuple[str, str]]:
    """Each Post's title and its folded shadow column, read from the daemon's own SQLite file."""
    with closing(sqlite3.connect(os.path.join(daemon.data_dir, "depot.sqlite"))) as db:
        return db.execute('SELECT title, "title#folded" FROM "e_Post" ORDER BY id').fetchall()


def test_a_folded_attribute_is_kept_right_on_every_daemon_and_one_that_joins_later() -> None:
    """``folded`` (docs/predicates.md): each daemon's store keeps the shadow column, whether it wrote
    the rows, applied them from the log or started from the cluster's tables, and ``[cd]`` fetches
    through any of them agree."""
    post = {"name": "Post", "attributes": [{"name": "title", "type": "string", "folded": True},
                                           {"name": "rank", "type": "integer", "default": 0}]}
    store, daemons = start_cluster(2)
    clients = [d.client() for d in daemons]
    try:
        clients[0].call("model/define", {"entities": [post]})
        titles = ["Étoile Rouge", "ÉCOLE", "crème brûlée", "Straße", "日本"]
        clients[1].save(inserted=[{"entity": "Post", "values": {"title": t}} for t in titles])
        clients[0].call("store/batchInsert", {"entity": "Post", "objects": [{"title": f"Écho {i}"} for i in range(50)]})
        last = clients[1].call("store/batchUpdate", {"entity": "Post", "predicate": "title == 'ÉCOLE'",
                                                     "values": {"title": "Ecole Ü"}})["transaction"]
        for client in clients:
            deadline = time.monotonic() + 10
            while client.call("store/history", {"since": 0, "limit": 1})["latest"] < last:
                assert time.monotonic() < deadline, "a daemon did not follow"
                time.sleep(0.05)
        daemons.append(Daemon(store=store))
        clients.append(daemons[-1].client())
        assert clients[2].call("model/get")["entities"][-1]["attributes"][0]["folded"] is True
        rows = [shadow_rows(d) for d in daemons]
        assert rows[0] == rows[1] == rows[2], "every store holds the same shadow column"
        assert rows[0][:3] == [("Étoile Rouge", "etoile rouge"), ("Ecole Ü", "ecole u"),
                               ("crème brûlée", "creme brulee")]
        for predicate, expected in [("title CONTAINS[cd] 'ECH'", 50), ("title CONTAINS[cd] 'ÉCO'", 1),
                                    ("title BEGINSWITH[cd] 'e'", 2 + 50),
                                    ("title ==[cd] 'ETOILE ROUGE'", 1)]:
            answers = [c.fetch({"entity": "Post", "predicate": predicate, "sort": [{"key": "title"}]})["objects"]
                       for c in clients]
            assert len(answers[0]) == expected, predicate
            assert answers[0] == answers[1] == answers[2], predicate
    finally:
        for client in clients:
            client.close()
        for running in daemons:
            running.stop()


def save_at_random(clients: List[depot.Client], rng: random.Random, ids: List[str], steps: int) -> int:
    """``steps`` random saves, round robin through ``clients``; the newest transaction number."""
    last = 0
    for step in range(steps):
        params = random_save(rng, ids, f"s{step}")
        try:
            result = clients[step % len(clients)].call("store/save", {**params, "mergePolicy": "objectTrump"})
        except depot.DepotError as error:
            assert "does not exist" in str(error), error  # deleted through another daemon meanwhile
            continue
        gone = {d["id"] for d in params["deleted"]}
        ids.extend(i for i in result["versions"] if i not in ids and i not in gone)
        last = max(last, result["transaction"] or 0)
    return last


def psql_rows(store: str, table: str) -> List[Dict[str, Any]]:
    """Every row of the cluster's PostgreSQL table ``table``, read with ``psql`` as a reporting tool would."""
    url, schema = store.split("?schema=")
    out = subprocess.run(["psql", url, "-X", "-At", "-c", f'SELECT to_jsonb(t) FROM "{schema}"."{table}" t'],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line]


def test_the_postgresql_tables_hold_what_every_daemon_serves() -> None:
    """Random saves, a model change, pairs and batches through two daemons: ``SELECT`` on the
    cluster's tables gives the ids, values and pairs every daemon's ``store/fetch`` gives."""
    store, daemons = start_cluster(2)
    clients = [d.client() for d in daemons]
    try:
        save_at_random(clients, random.Random(26), [], 60)
        clients[1].call("model/define", {"entities": [
            {"name": "Post", "attributes": [{"name": "title", "type": "string"}],
             "relationships": [{"name": "tags", "destination": "Tag", "toMany": True, "inverse": "posts"}]},
            {"name": "Tag", "attributes": [{"name": "name", "type": "string"}],
             "relationships": [{"name": "posts", "destination": "Post", "toMany": True, "inverse": "tags"}]},
        ]})
        clients[0].save(inserted=[
            {"entity": "Tag", "tempId": "a", "values": {"name": "a"}},
            {"entity": "Tag", "tempId": "b", "values": {"name": "b"}},
            {"entity": "Post", "tempId": "p", "values": {"title": "hello", "tags": ["a", "b"]}},
            {"entity": "Post", "tempId": "q", "values": {"title": "again", "tags": ["b"]}},
        ])
        clients[1].call("store/batchInsert", {"entity": "Tag", "objects": [{"name": f"t{i}"} for i in range(300)]})
        clients[0].call("store/batchDelete", {"entity": "Tag", "predicate": "name BEGINSWITH 't2'"})
        clients[1].call("store/batchUpdate", {"entity": "Team", "predicate": "wins < 5", "values": {"wins": 5}})
        latest = max(c.call("store/history", {"since": 0, "limit": 1})["latest"] for c in clients)
        for client in clients:
            deadline = time.monotonic() + 10
            while client.call("store/history", {"since": 0, "limit": 1})["latest"] < latest:
                assert time.monotonic() < deadline, "a daemon did not follow"
                time.sleep(0.05)

        teams = sorted(({"id": f"Team/{r['id']}", "entity": "Team", "teamName": r["teamName"],
                         "qualifyingZone": r["qualifyingZone"], "wins": r["wins"]}
                        for r in psql_rows(store, "e_Team")), key=lambda o: o["id"])
        pairs = psql_rows(store, "j_Post.tags")
        posts = sorted(({"id": f"Post/{r['id']}", "entity": "Post", "title": r["title"],
                         "tags": sorted(f"Tag/{p['b']}" for p in pairs if p["a"] == r["id"])}
                        for r in psql_rows(store, "e_Post")), key=lambda o: o["id"])
        tags = sorted(({"id": f"Tag/{r['id']}", "entity": "Tag", "name": r["name"]} for r in psql_rows(store, "e_Tag")),
                      key=lambda o: o["id"])
        assert len(teams) > 10 and len(posts) == 2 and len(tags) == 2 + 300 - 111 and len(pairs) == 3
        for client in clients:
            served = client.fetch({"entity": "Team", "properties": ["teamName", "qualifyingZone", "wins"]})
            assert sorted(served["objects"], key=lambda o: o["id"]) == teams
            served = client.fetch({"entity": "Post", "properties": ["title", "tags"]})
            assert sorted(({**o, "tags": sorted(o["tags"])} for o in served["objects"]),
                          key=lambda o: o["id"]) == posts
            served = client.fetch({"entity": "Tag", "properties": ["name"]})
            assert sorted(served["objects"], key=lambda o: o["id"]) == tags
    finally:
        for client in clients:
            client.close()
        for running in daemons:
            running.stop()


def test_a_daemon_that_joins_later_starts_from_the_tables_and_follows_with_exact_deltas() -> None:
    """A daemon started on an empty data directory after many transactions starts from the
    cluster's tables (its history begins there), serves equal fetches, and follows later writes
    with exact deltas."""
    store, daemons = start_cluster(2)
    clients = [d.client() for d in daemons]
    try:
        rng = random.Random(13)
        ids: List[str] = []
        latest = save_at_random(clients, rng, ids, 150)
        for client in clients:
            deadline = time.monotonic() + 10
            while client.call("store/history", {"since": 0, "limit": 1})["latest"] < latest:
                assert time.monotonic() < deadline, "a daemon did not follow"
                time.sleep(0.05)
        daemons.append(Daemon(store=store))
        joined = daemons[-1].client()
        clients.append(joined)
        with pytest.raises(depot.DepotError) as refused:
            joined.call("store/history", {"since": 0})
        assert refused.value.code == -32602 and f"begins after transaction {latest}" in str(refused.value)
        assert joined.call("store/history", {"since": latest})["transactions"] == [], "nothing replayed"
        assert joined.fetch(REQUEST)["objects"] == clients[0].fetch(REQUEST)["objects"]

        oracle = Oracle(joined)
        last = save_at_random(clients[:2], rng, ids, 40)
        oracle.check(last)
        for other in clients[:2]:
            # The daemon that did not commit the last save may be a poll behind.
            wait_until(lambda: other.call("store/history", {"since": latest, "limit": 1})["latest"] >= last,
                       "the other daemons to follow the last save")
            assert joined.fetch(REQUEST)["objects"] == other.fetch(REQUEST)["objects"]
            assert (joined.call("store/history", {"since": latest})["transactions"]
                    == other.call("store/history", {"since": latest})["transactions"])
        # And it writes: numbered after the others, seen by them.
        saved = joined.call("store/save", {"inserted": [{"entity": "Team", "values": {
            "teamName": "joined", "qualifyingZone": "Asia", "wins": 1}}]})
        assert saved["transaction"] == last + 1
    finally:
        for client in clients:
            client.close()
        for running in daemons:
            running.stop()


def psql_value(store: str, sql: str) -> str:
    """One value of ``sql`` (``{schema}`` stands for the cluster's schema), read with ``psql``."""
    url, schema = store.split("?schema=")
    return subprocess.run(["psql", url, "-X", "-At", "-c", sql.format(schema=f'"{schema}"')],
                          check=True, capture_output=True, text=True).stdout.strip()


class ResyncingOracle:
    """A subscription's mirror that may be told to resync: after a reload (``results/didInvalidate``
    then ``results/snapshot``) it starts again from the reloaded state, and every delta after that
    must apply strictly in seq order and give a fresh fetch."""

    def __init__(self, client: depot.Client) -> None:
        self.client = client
        self.invalidations: List[Any] = []
        self.failures: List[str] = []
        self.seqs: List[int] = []
        client.on_notification("results/didInvalidate", lambda m, p: self.invalidations.append(p))
        self.results = client.subscribe(REQUEST, section_key_path="qualifyingZone", include="all")
        self.state = self.results.state
        self.results.on_change(self._changed)

    def _changed(self, results: Any, change: Any) -> None:
        if change is None:
            self.state = results.state
            self.seqs = []
            return
        self.seqs.append(change["seq"])
        try:
            self.state = self.state.applying(change)
        except Exception as error:  # The oracle's own apply must never fail.
            self.failures.append(f"delta {change['seq']} does not apply: {error}")

    def check(self, transaction: int) -> None:
        assert self.results.wait_for_transaction(transaction, timeout=20), f"no delta for transaction {transaction}"
        assert not self.failures, self.failures
        if self.seqs:
            assert self.seqs == list(range(self.seqs[0], self.seqs[0] + len(self.seqs))), "seq without gaps"
        fresh = self.client.fetch(REQUEST)["objects"]
        assert [self.state.values[i] for i in self.state.ids] == fresh, "deltas applied == a fresh fetch"


def wait_until(condition: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_daemon_away_while_the_log_is_pruned_rebuilds_from_the_snapshot_and_follows_exactly() -> None:
    """With --log-retention 5 and --log-grace 1s, a daemon stopped while the others write is pruned
    past; started again on its data directory it rebuilds itself from the snapshot (its history begins
    there, -32602 says where), serves what the others serve, and its subscribers get exact deltas. The
    log stays at the retention while every daemon follows."""
    store = f"{STORE}?schema=c_{uuid.uuid4().hex[:12]}"
    retention = ("--log-retention", "5", "--log-grace", "1s")
    daemons = [Daemon(*retention, store=store)]
    with daemons[0].client() as client:
        client.call("model/define", TEST_MODEL)
    daemons.append(Daemon(*retention, store=store))
    clients = [d.client() for d in daemons]
    try:
        rng = random.Random(29)
        ids: List[str] = []
        save_at_random(clients, rng, ids, 20)
        node = f"%:{os.path.abspath(daemons[1].data_dir)}"
        wait_until(lambda: psql_value(store, f"SELECT count(*) FROM {{schema}}.daemon_positions "
                                             f"WHERE node LIKE '{node}'") == "1", "the daemon's position")
        clients.pop().close()
        daemons[1].stop(keep_data=True)
        with closing(sqlite3.connect(os.path.join(daemons[1].data_dir, "depot.sqlite"))) as db:
            away = int(db.execute("SELECT value FROM depot_meta WHERE key = 'clusterPosition'").fetchone()[0])
        latest = save_at_random(clients, rng, ids, 40)
        wait_until(lambda: int(psql_value(store, 'SELECT min("transaction") FROM {schema}.change_log')) > away + 1,
                   "the log pruned past the daemon away")

        daemons[1] = Daemon(*retention, store=store, data_dir=daemons[1].data_dir)
        back = daemons[1].client()
        clients.append(back)
        with pytest.raises(depot.DepotError) as refused:
            back.call("store/history", {"since": 0})
        assert refused.value.code == -32602 and f"begins after transaction {latest}" in str(refused.value)
        assert back.fetch(REQUEST)["objects"] == clients[0].fetch(REQUEST)["objects"]

        oracles = [ResyncingOracle(client) for client in clients]
        last = save_at_random(clients, rng, ids, 30)
        for oracle in oracles:
            oracle.check(last)
            assert oracle.invalidations == []
        for client in clients:
            wait_until(lambda: client.call("store/history", {"since": latest, "limit": 1})["latest"] >= last,
                       "every daemon to follow")
        assert (back.call("store/history", {"since": latest})["transactions"]
                == clients[0].call("store/history", {"since": latest})["transactions"])
        # Every daemon follows: the log keeps the newest 5 (pruned at most a second apart).
        wait_until(lambda: int(psql_value(store, "SELECT count(*) FROM {schema}.change_log")) <= 5,
                   "the log at its retention")
    finally:
        for client in clients:
            client.close()
        for running in daemons:
            running.stop()


def test_a_replica_changed_behind_a_running_daemon_repairs_itself_and_its_subscribers_resync() -> None:
    """A row changed with sqlite3 in a running daemon's file: the next entry that touches the row
    carries a checksum the replica does not reach, so it rebuilds itself from the snapshot; its
    subscribers get results/didInvalidate (reason rebuilt), resync, and get exact deltas after."""
    store, daemons = start_cluster(2)
    clients = [d.client() for d in daemons]
    try:
        rng = random.Random(31)
        ids: List[str] = []
        last = save_at_random(clients, rng, ids, 30)
        wait_until(lambda: clients[1].call("store/history", {"since": 0, "limit": 1})["latest"] >= last,
                   "the second daemon to follow")
        oracle = ResyncingOracle(clients[1])
        target = ids[0]
        with closing(sqlite3.connect(os.path.join(daemons[1].data_dir, "depot.sqlite"))) as db, db:
            db.execute('UPDATE "e_Team" SET "teamName" = ? WHERE id = ?',
                       ("changed by hand", int(target.split("/")[1])))
        assert any(o["teamName"] == "changed by hand" for o in clients[1].fetch(REQUEST)["objects"])

        clients[0].call("store/save", {"updated": [{"id": target, "values": {"wins": 42}}]})
        wait_until(lambda: any(p.get("reason") == "rebuilt" for p in oracle.invalidations), "results/didInvalidate")
        last = save_at_random(clients, rng, ids, 20)
        oracle.check(last)
        wait_until(lambda: clients[0].call("store/history", {"since": 0, "limit": 1})["latest"] >= last,
                   "the first daemon to follow")
        served = clients[1].fetch(REQUEST)["objects"]
        assert served == clients[0].fetch(REQUEST)["objects"]
        assert all(o["teamName"] != "changed by hand" for o in served)
    finally:
        for client in clients:
            client.close()
        for running in daemons:
            running.stop()


class PostgresProxy:
    """A TCP proxy between one daemon and PostgreSQL that the test controls: ``cut`` closes every
    connection and refuses new ones (a network cut the daemon hears of), ``stall`` stops forwarding
    while keeping the connections open (a partition without FIN), ``heal`` ends either (stalled
    connections are closed, as the partition's end would reset them)."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.mode = "open"
        self.lock = threading.Lock()
        self.sockets: List[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self.mode == "cut":
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                downstream.close()
                continue
            with self.lock:
                self.sockets += [downstream, upstream]
            for source, target in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        source.settimeout(0.05)
        while True:
            if self.mode == "stall":
                time.sleep(0.05)
                continue
            try:
                data = source.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                data = b""
            # Received just as the stall began: held back, like what follows.
            while self.mode == "stall":
                time.sleep(0.05)
            if not data:
                for each in (source, target):
                    try:
                        each.close()
                    except OSError:
                        pass
                return
            try:
                target.sendall(data)
            except OSError:
                return

    def _close_all(self) -> None:
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for each in sockets:
            try:
                each.shutdown(socket.SHUT_RDWR)
                each.close()
            except OSError:
                pass

    def cut(self) -> None:
        self.mode = "cut"
        self._close_all()

    def stall(self) -> None:
        self.mode = "stall"

    def heal(self) -> None:
        if self.mode == "stall":
            self._close_all()
        self.mode = "open"

    def close(self) -> None:
        self.mode = "cut"
        self.listener.close()
        self._close_all()


def test_a_network_cut_and_a_stall_between_one_daemon_and_postgresql() -> None:
    """Daemon A reaches PostgreSQL through a proxy the test controls, B directly. Cut, then stalled
    (no FIN: only the statement timeout, 10 s, notices): A's write fails with -32603 naming PostgreSQL
    within bounded time and never hangs, A keeps serving reads from its replica, B writes on. Healed,
    A follows what B committed meanwhile with exact deltas (the oracle) and writes again; both serve
    the same objects."""
    parsed = urllib.parse.urlsplit(STORE)
    proxy = PostgresProxy(parsed.hostname or "127.0.0.1", parsed.port or 5432)
    schema = f"c_{uuid.uuid4().hex[:12]}"
    proxied = parsed._replace(netloc=f"{parsed.username}@127.0.0.1:{proxy.port}").geturl()
    a = Daemon(store=f"{proxied}?schema={schema}")
    with a.client() as client:
        client.call("model/define", TEST_MODEL)
    b = Daemon(store=f"{STORE}?schema={schema}")
    try:
        with a.client() as on_a, b.client() as on_b:
            oracle = Oracle(on_a)
            team: Dict[str, Any] = {
                "entity": "Team", "values": {"teamName": "Before", "wins": 1, "qualifyingZone": "Asia"}}
            oracle.check(on_b.save(inserted=[team])["transaction"])
            for fault, bound in (("cut", 15.0), ("stall", 25.0)):
                assert proxy.sockets, "daemon A goes through the proxy"
                getattr(proxy, fault)()
                started = time.monotonic()
                with pytest.raises(depot.InternalError) as refused:
                    on_a.save(inserted=[{**team, "values": {**team["values"], "teamName": f"A during {fault}"}}])
                assert time.monotonic() - started < bound, "a clear error, not a hang"
                assert "PostgreSQL" in str(refused.value)
                during = on_b.save(inserted=[{**team, "values": {**team["values"], "teamName": f"B during {fault}"}}])
                assert "A during" not in str(on_a.fetch(REQUEST)["objects"]), "reads go on from the replica"
                proxy.heal()
                oracle.check(during["transaction"])
                deadline = time.monotonic() + 30
                while True:
                    try:
                        after = on_a.save(
                            inserted=[{**team, "values": {**team["values"], "teamName": f"A after {fault}"}}])
                        break
                    except depot.InternalError:
                        assert time.monotonic() < deadline, "the daemon did not reconnect"
                        time.sleep(0.2)
                oracle.check(after["transaction"])
                wait_until(lambda: on_b.fetch(REQUEST)["objects"] == on_a.fetch(REQUEST)["objects"],
                           "both daemons to serve the same objects")
            names = sorted(o["teamName"] for o in on_a.fetch(REQUEST)["objects"])
            assert names == sorted(["Before", "B during cut", "A after cut", "B during stall", "A after stall"])
    finally:
        for running in (a, b):
            running.stop()
        proxy.close()


def history_ids(record: Dict[str, Any]) -> List[str]:
    """Every object id a history record names, whatever the change."""
    ids: List[str] = []
    for changes in record["changes"].values():
        for value in changes.values():
            if isinstance(value, list):
                ids += [i if isinstance(i, str) else i["id"] for i in value]
    return ids


def test_a_checker_over_every_clients_history_finds_one_order_read_your_writes_and_monotonic_reads() -> None:
    """Six sessions, two on each of three daemons, save and read at random at once (seed 26); each
    session updates only objects it inserted, so it knows what it must read. Over every session's
    history: each read's transaction is at least the session's previous read's and its own last save's
    (monotonic reads, read-your-writes on the committing daemon), and shows its objects as it last wrote
    them. Then every acknowledged save is in the log (PostgreSQL's change_log) and, with the same
    number, in every daemon's history; the histories are equal (one order everywhere), and every
    daemon serves the objects as their writers last wrote them."""
    store, daemons = start_cluster(3)
    errors: List[str] = []
    acknowledged: List[Tuple[int, str, int]] = []  # (transaction, id, wins)
    lock = threading.Lock()

    def session(number: int) -> None:
        rng = random.Random(26 * 100 + number)
        mine: Dict[str, int] = {}
        last_seen = 0
        try:
            with daemons[number % 3].client() as client:
                for step in range(30):
                    if rng.random() < 0.5 or not mine:
                        if mine and rng.random() < 0.6:
                            target = rng.choice(sorted(mine))
                            # Another value: a save that changes nothing commits no transaction.
                            wins = (mine[target] + rng.randint(1, 99)) % 100
                            result = client.save(updated=[{"id": target, "values": {"wins": wins}}])
                        else:
                            wins = rng.randint(0, 99)
                            result = client.save(inserted=[{"entity": "Team", "values": {
                                "teamName": f"s{number}-{step}", "wins": wins, "qualifyingZone": rng.choice(ZONES)}}])
                            target = next(iter(result["versions"]))
                        mine[target] = wins
                        transaction = result["transaction"]
                        with lock:
                            acknowledged.append((transaction, target, wins))
                        if transaction < last_seen:
                            errors.append(f"session {number}: save {transaction} after reading {last_seen}")
                        last_seen = max(last_seen, transaction)
                    else:
                        read = client.fetch(REQUEST)
                        if read["transaction"] < last_seen:
                            errors.append(f"session {number}: read {read['transaction']} after {last_seen}")
                        last_seen = max(last_seen, read["transaction"])
                        seen = {o["id"]: o["wins"] for o in read["objects"] if o["id"] in mine}
                        if seen != mine:
                            errors.append(f"session {number} step {step}: read {seen}, wrote {mine}")
        except Exception as error:  # Any failure of a session is a failure of the test.
            errors.append(f"session {number}: {error!r}")

    threads = [threading.Thread(target=session, args=(n,)) for n in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        latest = max(t for t, _, _ in acknowledged)
        clients = [d.client() for d in daemons]
        try:
            wait_until(lambda: all(c.call("store/history", {"since": 0, "limit": 1})["latest"] >= latest
                                   for c in clients), "every daemon to follow the last save")
            histories = [c.call("store/history", {"since": 0})["transactions"] for c in clients]
            assert histories[1] == histories[0] and histories[2] == histories[0], "one order everywhere"
            by_number = {record["transaction"]: record for record in histories[0]}
            for transaction, target, _ in acknowledged:
                assert target in history_ids(by_number[transaction]), f"save {transaction} of {target}"
            logged = {row["changes"].get("transaction") for row in psql_rows(store, "change_log")
                      if row["changes"].get("kind") == "data"}
            assert {t for t, _, _ in acknowledged} <= logged, "every acknowledged save is in the log"
            final: Dict[str, int] = {}
            for transaction, target, wins in sorted(acknowledged):
                final[target] = wins
            for client in clients:
                served = {o["id"]: o["wins"] for o in client.fetch(REQUEST)["objects"]}
                assert served == final
        finally:
            for client in clients:
                client.close()
    finally:
        for running in daemons:
            running.stop()


def test_kill_9_at_many_points_of_the_write_path_loses_no_acknowledged_save() -> None:
    """Eight times (seed 9), a daemon saving as fast as it can is killed with SIGKILL after a random
    delay, so at a different point of its write path each time (running the write, appending, committing
    locally, publishing), while the other daemon saves too; it restarts on its data directory. Every
    acknowledged save is then on both daemons, the save in flight at each kill is on both or on neither,
    no save is there twice, and both histories are equal."""
    store, daemons = start_cluster(2)
    survivor = daemons[0]
    rng = random.Random(9)
    acknowledged: List[str] = []
    errors: List[str] = []

    def saves(daemon: Daemon, tag: str, stop: threading.Event, victim: bool) -> None:
        # A killed daemon never answers: the victim's client gives up soon.
        with daemon.client(timeout=3 if victim else 20) as client:
            for index in range(100_000):
                if stop.is_set():
                    return
                name = f"{tag}-{index}"
                try:
                    client.save(inserted=[{"entity": "Team", "values": {
                        "teamName": name, "wins": index % 10, "qualifyingZone": "Asia"}}])
                except Exception as error:  # Killed under the save: its outcome is the log's.
                    if not victim:
                        errors.append(f"{name}: {error!r}")
                    return
                acknowledged.append(name)

    try:
        stop_survivor = threading.Event()
        survivor_writer = threading.Thread(target=saves, args=(survivor, "s", stop_survivor, False))
        survivor_writer.start()
        for round_ in range(8):
            stop = threading.Event()
            writer = threading.Thread(target=saves, args=(daemons[1], f"v{round_}", stop, True))
            writer.start()
            time.sleep(rng.uniform(0.05, 0.5))
            daemons[1].kill()
            writer.join(timeout=15)
            assert not writer.is_alive(), "a save on a killed daemon hung"
            daemons[1] = Daemon(store=store, data_dir=daemons[1].data_dir)
        stop_survivor.set()
        survivor_writer.join(timeout=15)
        with survivor.client() as first, daemons[1].client() as second:
            latest = first.call("store/history", {"since": 0, "limit": 1})["latest"]
            wait_until(lambda: second.call("store/history", {"since": 0, "limit": 1})["latest"] >= latest,
                       "the restarted daemon to follow")
            names = [[o["teamName"] for o in c.fetch(REQUEST)["objects"]] for c in (first, second)]
            assert sorted(names[0]) == sorted(names[1])
            assert len(names[0]) == len(set(names[0])), "no save applied twice"
            assert set(acknowledged) <= set(names[0]), "every acknowledged save survives"
            assert len(acknowledged) > 8
            assert not errors, errors
            assert (first.call("store/history", {"since": 0})["transactions"]
                    == second.call("store/history", {"since": 0})["transactions"])
    finally:
        for running in daemons:
            running.stop()
