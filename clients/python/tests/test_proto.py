"""proto/ against the code and live traffic.

- proto/ is what proto/generate.py writes (no hand edits drifting from the generator);
- every method and notification type of Sources/DepotProtocol/Methods/*.swift is described;
- every method the daemon serves is described: the names it announces in ``initialize``
  (``capabilities.methods``), and -32601 only for methods proto/ marks as not served yet;
- every message the Python suites sent and received (recorded by the clients, see
  conftest.TRAFFIC) validates: request params against the method's params schema (a request
  whose params do not must have been answered with an error), results against the result
  schema, errors against the error schema and the method's error list, notifications against
  proto/schemas/. This module runs last (conftest reorders it) so it sees everyone's traffic.
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any, Dict, List, Optional, Tuple

import jsonschema
import pytest

import depot
from conftest import REPO, TRAFFIC, Daemon

PROTO = REPO / "proto"
OPENRPC = json.loads((PROTO / "depot.openrpc.json").read_text())
METHODS = {m["name"]: m for m in OPENRPC["methods"]}
NOTIFICATIONS = {n["name"]: n for n in OPENRPC["x-notifications"]}
DEFS = OPENRPC["components"]["schemas"]


def validator(schema: Dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A validator for a schema of the OpenRPC document (its refs resolved against the components)."""
    text = json.dumps({**schema, "$defs": DEFS}).replace("#/components/schemas/", "#/$defs/")
    return jsonschema.Draft202012Validator(json.loads(text), format_checker=jsonschema.FormatChecker())


PARAMS = {name: validator(m["x-params-schema"]) for name, m in METHODS.items()}
RESULTS = {name: validator(m["result"]["schema"]) for name, m in METHODS.items()}
ERROR_CODES = {name: {e["code"] for e in m["errors"]} for name, m in METHODS.items()}
ERROR_DATA = {int(code): validator(schema) for code, schema in OPENRPC["x-error-data"].items()}
NOTIFICATION_SCHEMAS = {
    name: jsonschema.Draft202012Validator(json.loads((PROTO / n["schema"]).read_text()))
    for name, n in NOTIFICATIONS.items()}
ERROR_RESPONSE = jsonschema.Draft202012Validator(json.loads((PROTO / "schemas" / "error.json").read_text()))


def problems(v: jsonschema.Draft202012Validator, instance: Any) -> List[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in v.iter_errors(instance)]


def test_proto_files_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("proto_generate", PROTO / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path, text in module.build().items():
        assert (PROTO / path).read_text() == text, f"proto/{path} is stale: run python3 proto/generate.py"


def test_every_schema_is_a_valid_json_schema() -> None:
    for name, m in METHODS.items():
        jsonschema.Draft202012Validator.check_schema(m["x-params-schema"])
        jsonschema.Draft202012Validator.check_schema(m["result"]["schema"])
        assert m["paramStructure"] == "by-name" and isinstance(m["params"], list), name
    for path in (PROTO / "schemas").glob("*.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))
    assert OPENRPC["openrpc"].startswith("1.")


def test_every_swift_method_type_is_in_proto() -> None:
    """The Codable types are the source of truth: each `static let name` there is described here."""
    names = set()
    for path in (REPO / "Sources" / "DepotProtocol" / "Methods").glob("*.swift"):
        names |= set(re.findall(r'public static let name = "([^"]+)"', path.read_text()))
    assert names, "no method names found in Sources/DepotProtocol/Methods"
    missing = sorted(names - set(METHODS) - set(NOTIFICATIONS))
    assert not missing, f"Swift defines methods or notifications that proto/ lacks: {missing}"


def test_the_daemon_serves_nothing_that_proto_lacks(daemon: Daemon) -> None:
    with daemon.client() as client:
        announced = client.capabilities.get("methods")
        if announced is not None:
            assert sorted(set(announced) - set(METHODS)) == [], "initialize announces methods that proto/ lacks"
        unserved = []
        for name in METHODS:
            if name in ("initialize", "disconnect"):
                continue
            try:
                client.call(name, {})
            except depot.MethodNotFoundError:
                unserved.append(name)
                assert "x-status" in METHODS[name], f"{name} is in proto/ as served but the daemon answers -32601"
            except depot.DepotError:
                pass
            if announced is not None:
                assert (name in unserved) == (name not in announced), name
        with pytest.raises(depot.MethodNotFoundError):
            client.call("store/noSuchMethod", {})
    served_but_marked = [n for n in METHODS if "x-status" in METHODS[n] and n not in unserved
                         and n not in ("initialize", "disconnect")]
    print("proto methods marked not-yet-served that the daemon now serves:", served_but_marked)


def scenario(client: depot.Client) -> None:
    """One call of every served method with valid params, so this module has traffic of its own."""
    client.call("model/get")
    client.call("store/observe", {"entities": ["Team"], "includeValues": True})
    saved = client.save(inserted=[{"entity": "Team", "tempId": "p", "values": {
        "teamName": "Proto FC", "qualifyingZone": "Europe"}}], author="proto")
    team = saved["ids"]["p"]
    client.save(updated=[{"id": team, "version": 1, "values": {"wins": 3}}])
    client.fetch({"entity": "Team", "sort": [{"key": "wins", "ascending": False}], "limit": 5},
                 progress=lambda value: None)
    client.call("store/fetch", {"entity": "Team", "resultType": "ids"})
    client.call("store/fetch", {"entity": "Team", "resultType": "count", "countFirst": True, "workDoneToken": 7})
    client.call("store/fetch", {"entity": "Team", "partialResultToken": "chunks", "batchSize": 2})
    client.call("store/count", {"entity": "Team"})
    client.call("store/get", {"ids": [team, "Team/987654"], "properties": ["teamName"]})
    client.call("store/history", {"since": 0, "limit": 3})
    observer = client.call("store/observe", {})["observer"]
    client.call("store/unobserve", {"observer": observer})
    for name, params in [("store/batchUpdate", {"entity": "Team", "values": {"wins": 1}}),
                         ("results/deleteCache", {})]:
        try:
            client.call(name, params)
        except depot.DepotError:
            pass


def test_recorded_traffic_matches_proto(daemon: Daemon) -> None:
    with daemon.client() as client:
        scenario(client)
    failures: List[str] = []
    counts: Dict[str, int] = {}
    for connection in TRAFFIC.connections:
        failures += check_connection(list(connection), counts)
    print("validated", counts)
    assert counts.get("result", 0) > 20 and counts.get("notification", 0) > 3, counts
    assert not failures, f"{len(failures)} messages do not match proto/:\n" + "\n".join(failures[:40])


def check_connection(messages: List[Tuple[str, Any]], counts: Dict[str, int]) -> List[str]:
    failures: List[str] = []
    requests: Dict[Any, Tuple[str, Any, List[str]]] = {}

    def fail(where: str, what: str, issues: List[str], message: Any) -> None:
        failures.append(f"{where} {what}: {'; '.join(issues[:3])}\n    {json.dumps(message)[:300]}")

    for direction, message in messages:
        for element in message if isinstance(message, list) else [message]:
            kind = classify(element)
            counts[kind] = counts.get(kind, 0) + 1
            if direction == "send" and kind == "request":
                name = element["method"]
                issues = problems(PARAMS[name], element.get("params", {})) if name in PARAMS else []
                requests[element["id"]] = (name, element.get("params"), issues)
            elif direction == "send" and kind == "notification":
                check_notification(element, fail)
            elif direction == "receive" and kind == "notification":
                check_notification(element, fail)
            elif direction == "receive" and kind in ("result", "error"):
                name, params, param_issues = requests.pop(element.get("id"), (None, None, []))
                if kind == "error":
                    check_error(element, name, fail)
                    continue
                if name is None:
                    fail("response", "to an unknown request id", ["no request had this id"], element)
                    continue
                if name not in METHODS:
                    fail("result", f"of {name}", ["the daemon answered a method proto/ lacks"], element)
                    continue
                if param_issues:
                    fail("request", f"{name} params", param_issues + ["(and the daemon accepted them)"], params)
                issues = problems(RESULTS[name], element["result"])
                if issues:
                    fail("result", f"of {name}", issues, element)
            elif kind == "other":
                fail(direction, "message", ["not a JSON-RPC 2.0 request, response or notification"], element)
    return failures


def classify(message: Any) -> str:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "other"
    if "method" in message:
        return "request" if "id" in message else "notification"
    if "result" in message:
        return "result"
    if "error" in message:
        return "error"
    return "other"


def check_notification(message: Dict[str, Any], fail: Any) -> None:
    name = message["method"]
    if name not in NOTIFICATION_SCHEMAS:
        fail("notification", name, ["proto/ describes no such notification"], message)
        return
    issues = problems(NOTIFICATION_SCHEMAS[name], message)
    if issues:
        fail("notification", name, issues, message)


def check_error(message: Dict[str, Any], method: Optional[str], fail: Any) -> None:
    issues = problems(ERROR_RESPONSE, message)
    if issues:
        fail("error", f"of {method}", issues, message)
        return
    code = message["error"]["code"]
    if method in ERROR_CODES and code not in ERROR_CODES[method]:
        fail("error", f"of {method}", [f"code {code} is not among the method's errors in proto/"], message)
    data = message["error"].get("data")
    if data is not None and code in ERROR_DATA:
        issues = problems(ERROR_DATA[code], data)
        if issues:
            fail("error data", f"of {method} ({code})", issues, message)
