#!/usr/bin/env python3
"""A soak run of depotd: mixed load from many client processes, every delta checked.

Starts a real ``depotd`` on a temporary data directory and, for ``--duration``
seconds, runs against it in separate processes:

* writers saving, updating and deleting single objects;
* a batch writer (``store/batchInsert``/``batchUpdate``/``batchDelete``), some
  of whose batches it cancels with ``$/cancelRequest``;
* subscribers churning fetched-results subscriptions, applying every
  ``results/didChange`` by the DESIGN.md section 7 rule and checking the
  session's order: no delta before its subscribe answer or after its
  unsubscribe answer, ``seq`` without gaps, and every ``results/objects`` and
  ``results/snapshot`` answer equal to the deltas' results at its ``seq``;
* an observer of ``store/didSave`` whose notifications must cover every
  transaction in ``store/history``;
* clients killed with SIGKILL in the middle of a large request, and senders of
  malformed messages, after which the daemon must still answer.

It samples the daemon's RSS, stops it with SIGTERM (exit status 0 expected),
runs ``PRAGMA integrity_check`` and prints a report (``--json`` for a file).
It exits 1 on any anomaly, any unexpected error, any lost notification, a
failed integrity check, or RSS growth past ``--rss-growth-mb`` after warm-up.

    .venv/bin/python scripts/soak.py --depotd .build/debug/depotd --duration 60
    .venv/bin/python scripts/soak.py --depotd .build/release/depotd --duration 1800 --json soak.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python"))

import zmq  # noqa: E402

from depot.results import InconsistentDelta, ResultsState  # noqa: E402

MODEL = {
    "entities": [{
        "name": "Entry",
        "attributes": [
            {"name": "score", "type": "integer"},
            {"name": "bucket", "type": "string", "indexed": True},
            {"name": "label", "type": "string"},
            {"name": "at", "type": "date"},
        ],
    }]
}
BUCKETS = ["alpha", "beta", "gamma", "delta", "epsilon"]
EXPECTED_ERRORS = {-32800, -32012, -32014, -32602, -32601, -32700, -32600}
#: The table is kept near this many rows, so that memory measures the daemon, not the data set.
TABLE_ROWS = 8_000


class Peer:
    """A DEALER session speaking JSON-RPC, reading every message in arrival order."""

    def __init__(self, endpoint: str, name: str) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.next_id = 1
        self.inbox: List[Dict[str, Any]] = []
        answer = self.call("initialize", {"protocolVersion": "1", "clientInfo": {"name": name, "version": "1"},
                                          "capabilities": {}})
        if "result" not in answer:
            raise RuntimeError(f"initialize failed: {answer}")

    def send(self, method: str, params: Any, request_id: Optional[int] = None) -> int:
        if request_id is None:
            request_id = self.next_id
            self.next_id += 1
        self.socket.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                     "params": params}).encode())
        return request_id

    def notify(self, method: str, params: Any) -> None:
        self.socket.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode())

    def receive(self, timeout_ms: int = 10_000) -> Dict[str, Any]:
        if not self.socket.poll(timeout_ms):
            raise TimeoutError("no message from depotd within %d ms" % timeout_ms)
        return json.loads(self.socket.recv())

    def call(self, method: str, params: Any, timeout_ms: int = 30_000) -> Dict[str, Any]:
        """Sends a request and returns its answer; notifications meanwhile go to ``inbox``."""
        request_id = self.send(method, params)
        while True:
            message = self.receive(timeout_ms)
            if message.get("id") == request_id:
                return message
            self.inbox.append(message)

    def close(self) -> None:
        self.socket.close(0)
        self.context.term()


def error_code(answer: Dict[str, Any]) -> Optional[int]:
    error = answer.get("error")
    return int(error["code"]) if isinstance(error, dict) else None


# Workers: each runs until the deadline and puts one dict of counts on the queue.

def writer(endpoint: str, deadline: float, seed: int, queue: Any) -> None:
    rng = random.Random(seed)
    peer = Peer(endpoint, f"writer-{seed}")
    counts: Dict[str, Any] = {"saves": 0, "errors": [], "conflicts": 0}
    known: List[str] = []
    while time.time() < deadline:
        roll = rng.random()
        if roll < 0.5 or not known:
            params = {"inserted": [{"entity": "Entry", "tempId": "t", "values": {
                "score": rng.randrange(1000), "bucket": rng.choice(BUCKETS), "label": f"w{seed}-{counts['saves']}",
                "at": "2026-%02d-%02dT%02d:%02d:%02d.%03dZ" % (rng.randint(1, 12), rng.randint(1, 28),
                                                             rng.randrange(24), rng.randrange(60), rng.randrange(60),
                                                             rng.randrange(1000))}}]}
        elif roll < 0.85:
            params = {"updated": [{"id": rng.choice(known), "values": {"score": rng.randrange(1000),
                                                                       "bucket": rng.choice(BUCKETS)}}]}
        else:
            params = {"deleted": [{"id": known.pop(rng.randrange(len(known)))}]}
        answer = peer.call("store/save", params)
        peer.inbox.clear()
        code = error_code(answer)
        if code is None:
            counts["saves"] += 1
            if "t" in answer["result"].get("ids", {}):
                known.append(answer["result"]["ids"]["t"])
        elif code == -32013:  # an object another writer (or a batch) deleted
            counts["conflicts"] += 1
        else:
            counts["errors"].append(answer["error"])
    peer.close()
    queue.put(("writer", counts))


def batcher(endpoint: str, deadline: float, seed: int, queue: Any) -> None:
    rng = random.Random(seed)
    peer = Peer(endpoint, "batcher")
    counts: Dict[str, Any] = {"batches": 0, "cancelled": 0, "errors": []}
    serial = 0
    while time.time() < deadline:
        roll = rng.random()
        rows = peer.call("store/count", {"entity": "Entry"}).get("result", {}).get("count", 0)
        peer.inbox.clear()
        if rows > TABLE_ROWS:
            roll = 0.9  # a delete, to keep the table's size steady
        if roll < 0.5:
            size = rng.randint(200, 2000)
            objects = [{"score": rng.randrange(1000), "bucket": rng.choice(BUCKETS), "label": f"b{serial + i}",
                        "at": "2025-06-06T03:09:27.638Z"} for i in range(size)]
            serial += size
            params: Dict[str, Any] = {"entity": "Entry", "objects": objects, "workDoneToken": f"batch-{serial}"}
            method = "store/batchInsert"
        elif roll < 0.75:
            low = rng.randrange(1000)
            params = {"entity": "Entry", "predicate": "score BETWEEN {%d, %d}" % (low, low + 40),
                      "values": {"label": f"u{serial}"}}
            method = "store/batchUpdate"
        else:
            low = rng.randrange(1000)
            # Above the bound, delete a wide band: killed clients' batches still commit.
            width = 15 if rows <= TABLE_ROWS else 500
            params = {"entity": "Entry", "predicate": "score BETWEEN {%d, %d}" % (low, low + width)}
            method = "store/batchDelete"
        request_id = peer.send(method, params)
        if rng.random() < 0.2:
            time.sleep(rng.random() * 0.01)
            peer.notify("$/cancelRequest", {"id": request_id})
        while True:
            message = peer.receive(120_000)
            if message.get("id") == request_id:
                break
        code = error_code(message)
        if code is None:
            counts["batches"] += 1
        elif code == -32800:
            counts["cancelled"] += 1
        else:
            counts["errors"].append(message["error"])
    peer.close()
    queue.put(("batcher", counts))


def subscriber(endpoint: str, deadline: float, seed: int, queue: Any) -> None:
    """Churns subscriptions and checks every message's place and content."""
    rng = random.Random(seed)
    peer = Peer(endpoint, f"subscriber-{seed}")
    counts: Dict[str, Any] = {"didChange": 0, "invalidated": 0, "objects": 0, "snapshots": 0, "subscribes": 0,
                              "anomalies": [], "errors": []}
    states: Dict[str, ResultsState] = {}
    closed: set = set()
    resyncing: set = set()
    pending: Dict[int, Any] = {}

    def anomaly(text: str) -> None:
        if len(counts["anomalies"]) < 50:
            counts["anomalies"].append(text)
        counts.setdefault("anomalyCount", 0)
        counts["anomalyCount"] += 1

    def handle(message: Dict[str, Any]) -> None:
        method = message.get("method")
        if method in ("results/didChange", "results/didInvalidate"):
            params = message["params"]
            subscription = params["subscription"]
            if subscription in closed:
                return anomaly(f"{method} for {subscription} after its unsubscribe answer")
            if subscription not in states:
                closed.add(subscription)
                return anomaly(f"{method} for {subscription} before its subscribe answer")
            if method == "results/didInvalidate":
                counts["invalidated"] += 1
                resyncing.add(subscription)
                pending[peer.send("results/snapshot", {"subscription": subscription})] = ("resync", subscription)
                return
            if subscription in resyncing:
                return  # the snapshot asked for covers it
            state = states[subscription]
            if params["seq"] != state.seq + 1:
                anomaly(f"seq {params['seq']} after {state.seq} on {subscription}")
            try:
                states[subscription] = state.applying(params)
            except InconsistentDelta as error:
                anomaly(f"delta does not apply on {subscription}: {error}")
            counts["didChange"] += 1
            return
        if method is not None:
            return
        request = pending.pop(message.get("id"), None)
        if request is None:
            return anomaly(f"an answer to no pending request: {str(message)[:200]}")
        kind, subscription = request[0], request[1]
        if "error" in message:
            if message["error"]["code"] != -32013:  # a subscription unsubscribed while the request was in flight
                counts["errors"].append(message["error"])
            return
        result = message["result"]
        if kind == "subscribe":
            if result["subscription"] in closed:
                anomaly(f"a delta for {result['subscription']} came before its subscribe answer")
            ids = [o["id"] for o in result["objects"]]
            states[result["subscription"]] = ResultsState.from_counts(
                result["sections"], ids, {o["id"]: o for o in result["objects"]}, result["seq"], result["transaction"])
            counts["subscribes"] += 1
        elif kind == "unsubscribe":
            states.pop(subscription, None)
            closed.add(subscription)
        elif kind in ("snapshot", "resync"):
            state = states.get(subscription)
            if state is None:
                return
            if kind == "resync":
                # After an invalidation: start over from the snapshot; values come again with later deltas.
                states[subscription] = ResultsState.from_counts(result["sections"], result["ids"], {},
                                                                result["seq"], result["transaction"])
                resyncing.discard(subscription)
                return
            counts["snapshots"] += 1
            if result["seq"] != state.seq:
                anomaly(f"snapshot of {subscription} at seq {result['seq']}, deltas at {state.seq}")
            elif result["ids"] != state.ids:
                anomaly(f"snapshot of {subscription} differs from the deltas' results at seq {state.seq}")
        elif kind == "objects":
            state = states.get(subscription)
            if state is None:
                return
            counts["objects"] += 1
            offset = request[2]
            if result["seq"] != state.seq:
                return anomaly(f"objects of {subscription} at seq {result['seq']}, deltas at {state.seq}")
            expected_ids = state.ids[offset:offset + 50]
            got = result["objects"]
            if any(o is None for o in got):
                return anomaly(f"objects of {subscription} carry null rows")
            if [o["id"] for o in got] != expected_ids:
                return anomaly(f"objects of {subscription} at {offset} are not the results at seq {state.seq}")
            for o in got:
                known = state.values.get(o["id"])
                if known is not None and known != o:
                    return anomaly(f"{o['id']} in objects differs from its last delta at seq {state.seq}")

    while time.time() < deadline:
        live = [s for s in states if s not in resyncing
                and not any(r[0] == "unsubscribe" and r[1] == s for r in pending.values())]
        roll = rng.random()
        if len(live) < 3 or (roll < 0.08 and len(live) < 5):
            low = rng.randrange(900)
            request = {"entity": "Entry", "predicate": "score >= %d AND score < %d" % (low, low + rng.randint(50, 400)),
                       "sort": [{"key": "bucket"}, {"key": "score", "ascending": rng.random() < 0.5},
                                {"key": "label"}]}
            params = {"request": request, "include": "all"}
            if rng.random() < 0.5:
                params["sectionKeyPath"] = "bucket"
            pending[peer.send("results/subscribe", params)] = ("subscribe", None)
        elif roll < 0.14 and live:
            subscription = rng.choice(live)
            pending[peer.send("results/unsubscribe", {"subscription": subscription})] = ("unsubscribe", subscription)
        elif roll < 0.3 and live:
            subscription = rng.choice(live)
            pending[peer.send("results/snapshot", {"subscription": subscription})] = ("snapshot", subscription)
        elif live:
            subscription = rng.choice(live)
            offset = rng.randrange(40)
            pending[peer.send("results/objects", {"subscription": subscription, "offset": offset, "length": 50})] = (
                "objects", subscription, offset)
        # Drain until every request is answered, then a little more.
        while pending:
            handle(peer.receive(30_000))
        end = time.time() + rng.random() * 0.05
        while time.time() < end and peer.socket.poll(5):
            handle(json.loads(peer.socket.recv()))
    peer.close()
    queue.put(("subscriber", counts))


def observer(endpoint: str, deadline: float, queue: Any) -> None:
    """Hears every store/didSave; at the end every transaction in history must have been heard."""
    peer = Peer(endpoint, "observer")
    counts: Dict[str, Any] = {"didSave": 0, "lost": [], "errors": []}
    seen: set = set()
    answer = peer.call("store/observe", {})
    if "error" in answer:
        counts["errors"].append(answer["error"])
    first = None
    next_ping = time.time() + 3
    while time.time() < deadline + 2:
        if time.time() >= next_ping:
            # A silent session expires after three heartbeat intervals: keep it alive, as the clients do.
            peer.send("ping", {}, request_id=0)
            next_ping = time.time() + 3
        if peer.inbox:
            message = peer.inbox.pop(0)
        elif peer.socket.poll(100):
            message = json.loads(peer.socket.recv())
        else:
            continue
        if message.get("method") == "store/didSave":
            number = message["params"]["transaction"]
            first = number if first is None else first
            seen.add(number)
            counts["didSave"] += 1
    # Catch up from history: everything after the first transaction heard must have been heard.
    if first is not None:
        since = first - 1
        while True:
            answer = peer.call("store/history", {"since": since, "limit": 1000})
            if "error" in answer:
                counts["errors"].append(answer["error"])
                break
            records = answer["result"]["transactions"]
            for record in records:
                if record["transaction"] not in seen and record["transaction"] <= max(seen):
                    counts["lost"].append(record["transaction"])
            if not records:
                break
            since = records[-1]["transaction"]
    peer.close()
    queue.put(("observer", counts))


def victim(endpoint: str) -> None:
    """Sends a large batch and waits; the parent kills it mid-request."""
    peer = Peer(endpoint, "victim")
    objects = [{"score": i % 1000, "bucket": "alpha", "label": f"v{i}", "at": "2024-01-01T00:00:00.000Z"}
               for i in range(500)]
    peer.send("store/batchInsert", {"entity": "Entry", "objects": objects})
    time.sleep(30)


def vandal(endpoint: str, deadline: float, seed: int, queue: Any) -> None:
    """Malformed messages and killed clients; the daemon must keep answering."""
    rng = random.Random(seed)
    counts: Dict[str, Any] = {"malformed": 0, "killed": 0, "errors": []}
    peer = Peer(endpoint, "vandal")
    context = multiprocessing.get_context("spawn")
    while time.time() < deadline:
        payloads = [b"{", b"[]", b"\x00\xff", b'{"jsonrpc":"2.0","id":"m1"}',
                    b'{"jsonrpc":"2.0","id":"m2","method":"nope"}',
                    b'{"jsonrpc":"2.0","id":"m3","method":"store/fetch","params":{"entity":7}}',
                    json.dumps({"jsonrpc": "2.0", "id": "m4", "method": "store/fetch",
                                "params": {"entity": "Entry", "predicate": "score >"}}).encode()]
        for payload in payloads:
            peer.socket.send(payload)
            counts["malformed"] += 1
        # Every one of them is answered, with an error.
        for _ in payloads:
            message = peer.receive(10_000)
            code = error_code(message)
            if code is None or code not in EXPECTED_ERRORS:
                counts["errors"].append({"message": f"malformed input answered {str(message)[:200]}"})
        if rng.random() < 0.5:
            process = context.Process(target=victim, args=(endpoint,))
            process.start()
            time.sleep(0.2 + rng.random() * 0.3)
            os.kill(process.pid, signal.SIGKILL)
            process.join()
            counts["killed"] += 1
        answer = peer.call("ping", {})
        if "result" not in answer:
            counts["errors"].append({"message": f"ping after vandalism: {answer}"})
        time.sleep(0.5)
    peer.close()
    queue.put(("vandal", counts))


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depotd", default=str(Path(__file__).resolve().parent.parent / ".build/debug/depotd"))
    parser.add_argument("--duration", type=float, default=1800)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=4)
    parser.add_argument("--rss-growth-mb", type=float, default=96,
                        help="the most RSS may grow from the end of warm-up (a tenth of the run, 10 s at least) to the end")
    parser.add_argument("--json", help="also write the report to this file")
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="depot-soak-"))
    model = directory / "model.json"
    model.write_text(json.dumps(MODEL))
    daemon = subprocess.Popen([args.depotd, "--data-dir", str(directory / "data"), "--listen", "tcp://127.0.0.1:*",
                               "--model", str(model), "--log-level", "warning"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert daemon.stdout is not None
    line = daemon.stdout.readline()
    if not line.startswith("depotd listening on "):
        print(f"depotd did not start: {line} {daemon.stderr.read() if daemon.stderr else ''}", file=sys.stderr)
        return 1
    endpoint = line.split("depotd listening on ", 1)[1].strip()
    started = time.time()
    deadline = started + args.duration
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=writer, args=(endpoint, deadline, seed, queue)) for seed in range(args.writers)]
    workers.append(context.Process(target=batcher, args=(endpoint, deadline, 100, queue)))
    workers += [context.Process(target=subscriber, args=(endpoint, deadline, 200 + seed, queue))
                for seed in range(args.subscribers)]
    workers.append(context.Process(target=observer, args=(endpoint, deadline, queue)))
    workers.append(context.Process(target=vandal, args=(endpoint, deadline, 300, queue)))
    for worker in workers:
        worker.start()

    warm_up = max(10.0, args.duration / 10)
    samples: List[Dict[str, float]] = []
    while time.time() < deadline:
        samples.append({"t": round(time.time() - started, 1), "rssMB": round(rss_kb(daemon.pid) / 1024, 1)})
        time.sleep(min(5.0, max(0.5, args.duration / 60)))
    samples.append({"t": round(time.time() - started, 1), "rssMB": round(rss_kb(daemon.pid) / 1024, 1)})

    results: Dict[str, List[Dict[str, Any]]] = {}
    for _ in workers:
        try:
            role, counts = queue.get(timeout=120)
        except Exception:  # noqa: BLE001 - a worker that died reports nothing: that is an error below
            break
        results.setdefault(role, []).append(counts)
    for worker in workers:
        worker.join(10)

    client = Peer(endpoint, "soak-report")
    latest = client.call("store/history", {"since": 0, "limit": 1})["result"]["latest"]
    client.close()
    daemon.send_signal(signal.SIGTERM)
    exit_status = daemon.wait(60)
    database = directory / "data" / "depot.sqlite"
    integrity = sqlite3.connect(str(database)).execute("PRAGMA integrity_check").fetchone()[0]
    file_bytes = sum(p.stat().st_size for p in (directory / "data").glob("depot.sqlite*"))

    def total(role: str, key: str) -> int:
        return sum(len(c[key]) if isinstance(c[key], list) else c[key] for c in results.get(role, []) if key in c)

    errors = [e for counts in (c for cs in results.values() for c in cs) for e in counts.get("errors", [])]
    anomalies = [a for c in results.get("subscriber", []) for a in c.get("anomalies", [])]
    anomaly_count = sum(c.get("anomalyCount", 0) for c in results.get("subscriber", []))
    lost = [n for c in results.get("observer", []) for n in c.get("lost", [])]
    warm = next((s["rssMB"] for s in samples if s["t"] >= warm_up), samples[0]["rssMB"])
    report = {
        "durationSeconds": round(time.time() - started, 1),
        "transactions": latest,
        "saves": total("writer", "saves"),
        "batches": total("batcher", "batches"),
        "batchesCancelled": total("batcher", "cancelled"),
        "didChange": total("subscriber", "didChange"),
        "didInvalidate": total("subscriber", "invalidated"),
        "subscribes": total("subscriber", "subscribes"),
        "objectsPagesChecked": total("subscriber", "objects"),
        "snapshotsChecked": total("subscriber", "snapshots"),
        "didSave": total("observer", "didSave"),
        "lostDidSave": len(lost),
        "malformedSent": total("vandal", "malformed"),
        "clientsKilled": total("vandal", "killed"),
        "anomalies": anomaly_count,
        "anomalyExamples": anomalies[:10],
        "errors": len(errors),
        "errorExamples": errors[:10],
        "workersReporting": sum(len(v) for v in results.values()),
        "workers": len(workers),
        "rssMB": {"start": samples[0]["rssMB"], "afterWarmUp": warm, "end": samples[-1]["rssMB"],
                  "max": max(s["rssMB"] for s in samples)},
        "rssSamples": samples,
        "daemonExitStatus": exit_status,
        "integrityCheck": integrity,
        "storeBytes": file_bytes,
        "storeBytesPer1000Transactions": round(file_bytes / max(latest, 1) * 1000),
    }
    failures = []
    if anomaly_count:
        failures.append(f"{anomaly_count} anomalies")
    if errors:
        failures.append(f"{len(errors)} unexpected errors")
    if lost:
        failures.append(f"{len(lost)} lost store/didSave")
    if report["workersReporting"] != len(workers):
        failures.append(f"only {report['workersReporting']} of {len(workers)} workers reported")
    if exit_status != 0:
        failures.append(f"depotd exited {exit_status} on SIGTERM")
    if integrity != "ok":
        failures.append(f"integrity_check: {integrity}")
    if samples[-1]["rssMB"] - warm > args.rss_growth_mb:
        failures.append(f"RSS grew {samples[-1]['rssMB'] - warm:.0f} MB after warm-up (bound {args.rss_growth_mb})")
    report["failures"] = failures
    summary = {k: v for k, v in report.items() if k != "rssSamples"}
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    print(("soak: FAILED: " + "; ".join(failures)) if failures else "soak: ok", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
