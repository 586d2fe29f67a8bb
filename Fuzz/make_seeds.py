#!/usr/bin/env python3
"""Writes the committed seed corpora of Fuzz/corpus/ from the tests and proto/ (run once; re-run to refresh).

- json: proto/ documents, Tests/Fixtures/worldcup.json and one message per method (from the OpenRPC
  params schemas, with a few hand-picked hostile shapes).
- predicate: every predicate of Tests/DepotStoreTests/PredicateTests.swift's cases table, plus the
  shapes of PredicateDifferentialTests.
- dispatch: message sequences (NUL-separated, first byte = peer) that initialize and then exercise
  every method, bad params and batches.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
from typing import List

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "Fuzz" / "corpus"


def write(kind: str, data: bytes) -> None:
    folder = CORPUS / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def request(method: str, params: object = None, rid: int = 1) -> bytes:
    message = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


# Text is bytes (DESIGN.md §4): spellings Swift's String == joins and Depot keeps apart.
LOOK_ALIKES = ["jos\u00e9", "jose\u0301", "\u00c5", "A\u030a", "\u212b", "\ufb01", "fi", "fi ", "K", "\u212a",
               "\u0301e", "\u00e9"]
LOOK_ALIKE_PREDICATES = [f"teamName {op} '{text}'" for op in ["==", "!=", "<", "BEGINSWITH", "ENDSWITH[c]",
                                                              "CONTAINS[d]", "LIKE", "==[cd]", "IN"]
                         for text in LOOK_ALIKES[:6]] + [
    "teamName IN {'jos\u00e9', 'jose\u0301'}", "zone BETWEEN {'A\u030a', '\u212b'}",
    "teamName MATCHES 'jose\u0301.*'", "ANY players.name == '\u212a'", "'\u0301' IN teamName",
    "teamName LIKE '*\u0301'", "teamName ENDSWITH '\u0301'",
    "teamName BEGINSWITH[c] '*\u0301'",  # found: a `*` before a combining mark reached GLOB unescaped
]

INIT = request("initialize", {"protocolVersion": "1", "clientInfo": {"name": "fuzz", "version": "1"}})

REQUESTS: List[bytes] = [
    request("ping"),
    request("model/get"),
    request("store/fetch", {"entity": "Team", "sort": [{"key": "teamName"}], "limit": 5}),
    request("store/fetch", {"entity": "Team", "predicate": "wins > %d", "arguments": [1], "resultType": "ids"}),
    request("store/fetch", {"entity": "Team", "batchSize": -1}),
    request("store/fetch", {"entity": "Team", "partialResultToken": "p", "batchSize": 2}),
    request("store/count", {"entity": "Player", "predicate": "team.teamName BEGINSWITH[cd] 'a'"}),
    request("store/get", {"ids": ["Team/1", "Player/2", "Nope/3", "x"]}),
    request("store/save", {"inserted": [{"entity": "Team", "tempId": "a", "values": {
        "teamName": "A", "wins": 2, "founded": "2026-01-01T00:00:00.250Z", "logo": "AAEC", "extra": {"k": [1]}}},
        {"entity": "Player", "values": {"name": "p", "team": "a"}}]}),
    request("store/save", {"updated": [{"id": "Team/1", "version": 1, "values": {"wins": 9}}],
                           "mergePolicy": "objectTrump"}),
    request("store/save", {"deleted": [{"id": "Team/1"}]}),
    request("store/batchInsert", {"entity": "Team", "objects": [{"teamName": "B"}, {"teamName": "B"}],
                                  "onConflict": "update"}),
    request("store/batchUpdate", {"entity": "Team", "predicate": "wins < 3", "values": {"wins": 3}}),
    request("store/batchDelete", {"entity": "Player", "predicate": "name == 'p'"}),
    request("store/observe", {"includeValues": True}),
    request("store/history", {"since": 0, "limit": 3}),
    request("results/subscribe", {"request": {"entity": "Team", "sort": [{"key": "wins"}]},
                                  "sectionKeyPath": "wins", "include": "all"}),
    request("results/objects", {"subscription": "s1", "offset": 0, "length": 10}),
    request("results/snapshot", {"subscription": "s1"}),
    request("results/unsubscribe", {"subscription": "s1"}),
    request("results/deleteCache", {}),
    request("model/define", {"entities": [{"name": "Note", "attributes": [{"name": "text", "type": "string"}]}]}),
    request("disconnect"),
    b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}}',
    b'[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","method":"ping"},5]',
    b'{"jsonrpc":"2.0","id":1,"method":"store/fetch","params":[1,2]}',
    b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"store/fetch","params":{"entity":"Team","limit":1e300}}',
]


def main() -> None:
    for path in sorted((ROOT / "proto").rglob("*.json")):
        if path.stat().st_size < 64_000:
            write("json", path.read_bytes())
    write("json", (ROOT / "Tests" / "Fixtures" / "worldcup.json").read_bytes())
    for text in REQUESTS + [INIT, b'"\\ud800"', b"[" * 300, b'{"a":-0.0e-400,"b":"\\u00e9\\n"}', b"1e99999"]:
        write("json", text)

    cases = (ROOT / "Tests" / "DepotStoreTests" / "PredicateTests.swift").read_text()
    predicates = set(re.findall(r'\("((?:[^"\\]|\\.)*)", (?:nil|\[|\.)', cases))
    predicates |= {
        "SUBQUERY(players, $p, $p.age > 20).@count > 0", "ANY players.name MATCHES[c] '(a|e)+.*'",
        "teamName LIKE[cd] '*t?i*'", "country.name IN {'France', nil}", "wins BETWEEN {1, 3}",
        "players.@avg.age >= 25 AND NOT (zone == nil)", "founded < '2001-01-01T00:00:00Z'", "TRUEPREDICATE",
        "ALL players.age > 18", "NONE players.name CONTAINS[d] 'e'", "teamName IN 'etoile étoile'",
    }
    for predicate in predicates:
        write("predicate", predicate.replace('\\"', '"').encode())
    for predicate in LOOK_ALIKE_PREDICATES:
        write("predicate", predicate.encode())

    # One peer: initialize, then one request; three peers: each initializes, then every request in turn.
    sequences = [[bytes([0]) + INIT, bytes([0]) + r] for r in REQUESTS]
    sequences.append([bytes([peer]) + INIT for peer in range(3)]
                     + [bytes([index % 3]) + r for index, r in enumerate(REQUESTS)])
    sequences.append([bytes([1]) + r for r in REQUESTS[:6]])  # no initialize: -32002 but for ping
    for sequence in sequences:
        write("dispatch", b"\0".join(sequence))
    print("seeds:", {kind.name: len(list(kind.iterdir())) for kind in sorted(CORPUS.iterdir())})


if __name__ == "__main__":
    main()
