#!/usr/bin/env python3
"""Rough: bytes of a resumed results/subscribe after 100 changes against a full resubscribe
(DESIGN.md §7, Resuming; issue 36). Bytes do not depend on the build, so a debug depotd will do:

    DEPOTD=.build/debug/depotd python3 scripts/measure-resume-bytes.py [rows] [groups]

Counts the compact JSON of each answer as the daemon sends it (re-encoded: rough).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import pathlib
from typing import Any, Dict

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "clients" / "python"))
import depot  # noqa: E402

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
GROUPS = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
DEPOTD = os.environ.get("DEPOTD", ".build/debug/depotd")


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def main() -> None:
    data = tempfile.mkdtemp(prefix="depot-resume-bytes-")
    process = subprocess.Popen([DEPOTD, "--data-dir", data, "--listen", "tcp://127.0.0.1:*", "--log-level",
                                "warning"], stdout=subprocess.PIPE, text=True)
    endpoint = process.stdout.readline().split()[-1]
    rng = random.Random(36)
    try:
        with depot.Client(endpoint, timeout=600) as client:
            client.call("model/define", {"entities": [{"name": "Item", "attributes": [
                {"name": "name", "type": "string"}, {"name": "rank", "type": "integer", "indexed": True},
                {"name": "group", "type": "integer"}, {"name": "amount", "type": "integer"}]}]})
            for start in range(0, ROWS, 10_000):
                client.call("store/batchInsert", {"entity": "Item", "objects": [
                    {"name": f"item {i}", "rank": i, "group": i % GROUPS, "amount": i % 7}
                    for i in range(start, min(ROWS, start + 10_000))]})
            plain = {"request": {"entity": "Item", "sort": [{"key": "rank"}]}, "include": "all"}
            grouped = {"request": {"entity": "Item", "sort": [{"key": "group"}], "groupBy": ["group"],
                                   "aggregates": [{"name": "items", "function": "count"},
                                                  {"name": "amount", "function": "sum", "key": "amount"}]},
                       "include": "all"}
            for label, params, change in (("100k rows", plain, "mixed"), (f"{GROUPS} groups", grouped, "amount")):
                full = client.call("results/subscribe", params)
                ids = client.call("results/snapshot", {"subscription": full["subscription"]})["ids"]
                client.call("results/unsubscribe", {"subscription": full["subscription"]})
                for index in range(100):
                    target = f"Item/{rng.randint(1, ROWS)}"
                    if change == "amount":
                        values: Dict[str, Any] = {"amount": rng.randint(0, 99)}
                    else:
                        values = {"name": f"renamed {index}"} if index % 2 == 0 else {"rank": rng.randint(0, ROWS)}
                    client.save(updated=[{"id": target, "values": values}])
                resumed = client.call("results/subscribe", {**params, "resume": {
                    "transaction": full["transaction"], "digest": depot.results_digest(ids)}})
                again = client.call("results/subscribe", params)
                print(f"{label}: resumed={resumed['resumed']} named={len(resumed.get('changed') or [])} "
                      f"resume {size(resumed)} B vs full resubscribe {size(again)} B: "
                      f"{100 * size(resumed) / size(again):.2f}%")
                for answer in (resumed, again):
                    client.call("results/unsubscribe", {"subscription": answer["subscription"]})
    finally:
        process.terminate()
        process.wait(30)


if __name__ == "__main__":
    main()
