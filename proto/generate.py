#!/usr/bin/env python3
"""Writes proto/depot.openrpc.json and proto/schemas/*.json.

The shapes follow the Codable types of Sources/DepotProtocol/Methods/*.swift
(the source of truth) and DESIGN.md (the contract). Edit this file, then run
``python3 proto/generate.py``; clients/python/tests/test_proto.py checks that the
committed JSON is what this script writes, and validates live traffic against it.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Dict, List, Optional

HERE = pathlib.Path(__file__).resolve().parent
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def ref(name: str) -> Dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: Dict[str, Any], optional: Optional[Dict[str, Any]] = None, *, closed: bool = True,
        description: Optional[str] = None) -> Dict[str, Any]:
    """An object schema; ``closed`` forbids members the Codable type does not have."""
    schema: Dict[str, Any] = {"type": "object", "properties": {**required, **(optional or {})}}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def nullable(schema: Dict[str, Any]) -> Dict[str, Any]:
    """An optional Swift value: the member may be absent or null."""
    return {"anyOf": [schema, {"type": "null"}]}


STRING = {"type": "string"}
INT = {"type": "integer"}
NONNEG = {"type": "integer", "minimum": 0}
BOOL = {"type": "boolean"}
NUMBER = {"type": "number", "minimum": 0}
ANY: Dict[str, Any] = {}
EMPTY = {"type": "object", "additionalProperties": False, "properties": {}}
NULL = {"type": "null"}

SCHEMAS: Dict[str, Any] = {
    "RequestId": {"description": "A JSON-RPC id: a string or an integer.", "type": ["string", "integer"]},
    "Token": {"description": "A workDoneToken or partialResultToken (strings and integers in practice).",
              "type": ["string", "integer"]},
    "ObjectId": {"description": "An object id, `Entity/row`.", "type": "string", "pattern": "^.+/[1-9][0-9]*$"},
    "GroupId": {"description": "A group's id in live grouped results (DESIGN.md §7): `group:` followed by the JSON "
                               "array of its groupBy values, stable while the group exists.",
                "type": "string", "pattern": "^group:\\[.*\\]$"},
    "Group": {"description": "One group of a live grouped result (DESIGN.md §7): its `id` and its groupBy keys and "
                             "aggregate names with their values (no entity or version).",
              "type": "object", "required": ["id"], "properties": {"id": ref("GroupId")}},
    "Transaction": {"description": "A committed transaction's number; 0 when nothing was committed.", **NONNEG},
    "Object": obj({"id": ref("ObjectId"), "entity": STRING}, {"version": {"type": "integer", "minimum": 1}},
                  closed=False,
                  description="A stored object: id, entity, version, attributes, to-one relationships as an id or "
                              "null; to-many ones, many-to-many included (arrays of ids, ascending), only when named in `properties`. With `properties`, "
                              "only id, entity and the named keys (no version)."),
    "Values": {"description": "Attribute and relationship values by key: a to-one as an id (or tempId) or null, "
                          "a to-many as an array of ids and tempIds that replaces the whole set, or "
                          "{\"add\": [ids], \"remove\": [ids]} that changes it.",
               "type": "object"},
    "ImplementationInfo": obj({"name": STRING, "version": STRING}),
    "Percentiles": obj({"count": {"type": "integer", "minimum": 0}, "meanMs": {"type": "number", "minimum": 0},
                        "p50Ms": {"type": "number", "minimum": 0}, "p90Ms": {"type": "number", "minimum": 0},
                        "p99Ms": {"type": "number", "minimum": 0}, "maxMs": {"type": "number", "minimum": 0}},
                       description="A latency distribution in milliseconds (each within 1/32 of the true value)."),
    "SortDescriptor": obj({"key": STRING}, {"ascending": BOOL}),
    "FetchRequest": obj(
        {"entity": STRING},
        {"predicate": nullable(STRING), "arguments": nullable({"type": ["object", "array"]}),
         "sort": nullable({"type": "array", "items": ref("SortDescriptor")}),
         "limit": nullable(NONNEG), "offset": nullable(NONNEG),
         "batchSize": nullable({"type": "integer", "minimum": 1}),
         "resultType": nullable({"enum": ["objects", "ids", "dictionaries", "count"]}),
         "properties": nullable({"type": "array", "items": STRING}),
         "workDoneToken": nullable(ref("Token")), "partialResultToken": nullable(ref("Token")),
         "countFirst": nullable(BOOL),
         "groupBy": nullable({"type": "array", "items": STRING}),
         "aggregates": nullable({"type": "array", "items": ref("ExpressionDescription")}),
         "having": nullable(STRING),
         "prefetch": nullable({"type": "array", "items": STRING})},
        description="A fetch request (DESIGN.md §5), like NSFetchRequest. With groupBy, aggregates or having it "
                    "is a grouped fetch: one dictionary per group (its groupBy keys and aggregate names), as "
                    "`dictionaries` or a count of the groups. `prefetch` names relationship key paths whose "
                    "objects the answer carries in `related`."),
    "Related": {"description": "With `prefetch` (DESIGN.md §5, §7): every object the key paths reach from the "
                               "rows answered, once each, keyed by id; objects outside the key's read scope are "
                               "left out.",
                "type": "object", "additionalProperties": ref("Object")},
    "ExpressionDescription": obj(
        {"name": STRING, "function": {"enum": ["count", "sum", "avg", "min", "max"]}},
        {"key": nullable(STRING)},
        description="An aggregate of a grouped fetch (Core Data's NSExpressionDescription): its name in each "
                    "group's dictionary, the function, and the attribute key path it reads (only count may "
                    "leave it out)."),
    "AttributeDescription": obj(
        {"name": STRING,
         "type": {"enum": ["string", "integer", "double", "boolean", "date", "uuid", "binary", "json"]}},
        {"optional": BOOL, "default": ANY, "indexed": BOOL, "folded": BOOL, "renamedFrom": nullable(STRING)}),
    "RelationshipDescription": obj(
        {"name": STRING, "destination": STRING},
        {"toMany": BOOL, "inverse": nullable(STRING),
         "deleteRule": {"enum": ["nullify", "cascade", "deny", "noAction"]},
         "optional": BOOL, "renamedFrom": nullable(STRING)},
        description="A relationship: to-one, to-many with a to-one inverse, or many-to-many (a to-many whose "
                    "inverse is to-many, kept in a join table). A to-many needs an inverse."),
    "EntityDescription": obj(
        {"name": STRING},
        {"attributes": {"type": "array", "items": ref("AttributeDescription")},
         "relationships": {"type": "array", "items": ref("RelationshipDescription")},
         "uniquenessConstraints": {"type": "array", "items": {"type": "array", "items": STRING}},
         "indexes": {"type": "array", "items": {"type": "array", "items": STRING}},
         "renamedFrom": nullable(STRING)}),
    "InsertedObject": obj({"entity": STRING}, {"tempId": nullable(STRING), "values": ref("Values")}),
    "UpdatedObject": obj({"id": STRING, "values": ref("Values")},
                         {"version": nullable(INT), "original": nullable(ref("Values"))}),
    "DeletedObject": obj({"id": STRING}, {"version": nullable(INT)}),
    "MergePolicy": {"enum": ["error", "objectTrump", "storeTrump", "overwrite", "rollback"]},
    "EntityChanges": obj({
        "inserted": {"type": "array", "items": ref("ObjectId")},
        "updated": {"type": "array", "items": obj({"id": ref("ObjectId"), "keys": {"type": "array", "items": STRING}})},
        "deleted": {"type": "array", "items": ref("ObjectId")}}),
    "Changes": {"description": "Changes by entity name.", "type": "object",
                "additionalProperties": ref("EntityChanges")},
    "TransactionRecord": obj({"transaction": ref("Transaction"), "timestamp": {"type": "string", "format": "date-time"},
                              "changes": ref("Changes")}, {"author": nullable(STRING)}),
    "SectionInfo": obj({"name": STRING, "indexTitle": STRING, "count": NONNEG}),
    "Digest": {"type": "string", "pattern": "^[0-9a-f]{64}$",
               "description": "Lowercase hex SHA-256 of an ordered id list's ids joined by \"\\n\" (DESIGN.md §7)."},
    "ResultsResume": obj({"transaction": ref("Transaction"), "digest": ref("Digest")},
                         description="The results a client holds of the same request, as of `transaction`."),
    "ResumedRow": obj({"id": {"anyOf": [ref("ObjectId"), ref("GroupId")]}},
                      {"indexPath": nullable(ref("IndexPath")),
                       "object": nullable(ref("Row"))},
                      description="A row that may have moved, entered, left or changed since the resume "
                                  "transaction: its current index path (absent: it left) and, as `include` says, "
                                  "its values."),
    "SectionChange": obj({"type": {"enum": ["insert", "delete"]}, "index": NONNEG, "name": STRING}),
    "IndexPath": {"type": "array", "items": NONNEG, "minItems": 2, "maxItems": 2},
    "ObjectChange": {
        **obj({"type": {"enum": ["insert", "delete", "move", "update"]},
               "id": {"anyOf": [ref("ObjectId"), ref("GroupId")]}},
              {"indexPath": nullable(ref("IndexPath")), "newIndexPath": nullable(ref("IndexPath")),
               "object": nullable(ref("Row"))}),
        "allOf": [
            {"if": {"properties": {"type": {"const": "delete"}}},
             "then": {"required": ["indexPath"]}},
            {"if": {"properties": {"type": {"const": "insert"}}},
             "then": {"required": ["newIndexPath", "object"]}},
            {"if": {"properties": {"type": {"enum": ["move", "update"]}}},
             "then": {"required": ["indexPath", "newIndexPath", "object"]}},
        ]},
    "Row": {"description": "A row of fetched results: an object, or for a grouped request a group.",
            "anyOf": [ref("Object"), ref("Group")]},
    "ConflictResolution": {"enum": ["error", "update", "ignore"]},
    "WorkDoneProgress": {
        "description": "A work-done $/progress value (LSP style).",
        "oneOf": [
            obj({"kind": {"const": "begin"}, "title": STRING, "total": nullable(NONNEG)},
                {"message": nullable(STRING), "completed": nullable(NONNEG),
                 "percentage": nullable({"type": "number"})}),
            obj({"kind": {"const": "report"}},
                {"completed": NONNEG, "total": nullable(NONNEG),
                 "percentage": {"type": "number", "minimum": 0, "maximum": 100},
                 "message": nullable(STRING)}),
            obj({"kind": {"const": "end"}, "cancelled": BOOL},
                {"completed": NONNEG, "total": nullable(NONNEG), "percentage": {"type": "number"},
                 "message": nullable(STRING)}),
        ]},
    "PartialResult": obj({"objects": {"type": "array"}}, description="A partial-result chunk of a fetch."),
    "ErrorObject": obj({"code": {"type": "integer"}, "message": {"type": "string", "minLength": 1}}, {"data": ANY},
                       description="A JSON-RPC error object (DESIGN.md §10)."),
}

# `data` of the errors that carry structured detail, by code (checked when present).
ERROR_DATA: Dict[int, Dict[str, Any]] = {
    -32700: obj({"offset": NONNEG}, closed=False),
    -32601: obj({"method": STRING}, closed=False),
    -32602: obj({"field": STRING}, closed=False),
    -32010: obj({"errors": {"type": "array", "minItems": 1, "items": obj(
        {"object": ANY, "key": STRING, "code": STRING, "message": STRING}, closed=False)}}, closed=False),
    -32011: obj({"entity": STRING, "constraint": {"type": "array", "items": STRING},
                 "objects": {"type": "array"}}, {"violations": {"type": "array"}}, closed=False),
    -32012: obj({"conflicts": {"type": "array", "minItems": 1, "items": obj(
        {"id": ref("ObjectId"), "keys": {"type": "array", "items": STRING}, "storeVersion": INT,
         "storeValues": {"type": "object"}}, closed=False)}}, closed=False),
    -32013: obj({}, {"id": STRING}, closed=False),
    -32014: obj({"position": NONNEG, "expected": {"type": ["string", "array"]}}, closed=False),
    -32015: obj({"id": ref("ObjectId"), "relationship": STRING, "objects": {"type": "array"}}, closed=False),
    -32016: obj({"change": STRING}, closed=False),
    # A method the role may not call names the method; a row-level scope refusal
    # (DESIGN.md §2) names the entity and the object and rule (a write) or the field (a key path).
    -32018: obj({}, {"method": STRING, "role": STRING, "required": STRING, "key": STRING, "entity": STRING,
                     "object": ref("ObjectId"), "rule": STRING, "field": STRING}, closed=False),
}
for code, schema in ERROR_DATA.items():
    SCHEMAS[f"ErrorData{-code}"] = schema

ERRORS = {
    -32700: "Parse error: the message is not JSON.",
    -32600: "Invalid request: not a JSON-RPC 2.0 request.",
    -32601: "Method not found.",
    -32602: "Invalid params; data.field names the bad field.",
    -32603: "Internal error of the daemon.",
    -32002: "Not initialized: a request other than initialize or ping came before initialize.",
    -32800: "Cancelled by the client ($/cancelRequest).",
    -32802: "Cancelled by the server (shutting down).",
    -32010: "Validation failed; data.errors lists every problem.",
    -32011: "Unique constraint violated; data names the constraint and objects.",
    -32012: "Merge conflict; data.conflicts lists {id, keys, storeVersion, storeValues}.",
    -32013: "Not found.",
    -32014: "Predicate syntax error; data has position and expected.",
    -32015: "Delete denied by a deny rule.",
    -32016: "Migration refused: more than a lightweight migration.",
    -32017: "Overloaded: a limit of the daemon (sessions, subscriptions or requests in flight per session) is reached.",
    -32018: "Forbidden: the client key's role does not allow the method (or the key was revoked), or its row-level "
            "scope does not allow the write, the key path or the method (data names the entity, object and rule).",
}
#: Errors any request may get.
COMMON_ERRORS = [-32600, -32601, -32602, -32603, -32002, -32802, -32017, -32018]


def error(code: int) -> Dict[str, Any]:
    return {"code": code, "message": ERRORS[code]}


def method(name: str, summary: str, params: Dict[str, Any], result: Dict[str, Any], *,
           errors: List[int] = (), served: bool = True, result_name: Optional[str] = None) -> Dict[str, Any]:
    """An OpenRPC method with named params described by one `params` object schema."""
    described = SCHEMAS[params["$ref"].rsplit("/", 1)[1]] if "$ref" in params else params
    entry: Dict[str, Any] = {
        "name": name, "summary": summary, "paramStructure": "by-name",
        "params": [{"name": key, "required": key in described.get("required", []), "schema": schema}
                   for key, schema in described.get("properties", {}).items()],
        "result": {"name": result_name or "result", "schema": result},
        "errors": [error(code) for code in sorted(set(COMMON_ERRORS) | set(errors), reverse=True)],
        "x-params-schema": params,
    }
    if not served:
        entry["x-status"] = "defined by DESIGN.md; not served by every depotd yet (answers -32601 until it lands)"
    return entry


SAVE_ERRORS = [-32010, -32011, -32012, -32013, -32015]

METHODS = [
    method("initialize", "Opens a session; every request but ping needs it first.",
           obj({"protocolVersion": {"const": "1"}},
               {"clientInfo": nullable(ref("ImplementationInfo")), "capabilities": nullable({"type": "object"})}),
           obj({"serverInfo": ref("ImplementationInfo"), "protocolVersion": STRING, "sessionId": STRING,
                "heartbeatInterval": {"type": "number", "exclusiveMinimum": 0},
                "capabilities": obj({}, {"methods": {"type": "array", "items": STRING}, "batch": BOOL,
                                         "progress": BOOL, "partialResults": BOOL, "cancellation": BOOL,
                                         "maxMessageSize": INT}, closed=False)})),
    method("ping", "Answers {}; also keeps the session alive.", EMPTY, EMPTY),
    method("disconnect", "Ends the session and frees its subscriptions.", EMPTY, NULL),
    method("model/define", "Defines or lightly migrates the entities it names; the model's other entities stay as "
           "they are (DESIGN.md §4). One call is one migration: all of it or none. Naming entities in `remove` is "
           "refused (-32016): removal is not a lightweight migration.",
           obj({"entities": {"type": "array", "items": ref("EntityDescription")}},
               {"remove": nullable({"type": "array", "items": STRING})}),
           obj({"version": NONNEG, "changes": {"type": "array", "items": STRING}},
               {"transaction": ref("Transaction")}), errors=[-32016]),
    method("model/get", "The current model.", EMPTY,
           obj({"version": NONNEG, "entities": {"type": "array", "items": ref("EntityDescription")}})),
    method("store/fetch", "Objects, ids, dictionaries or a count matching a fetch request (DESIGN.md §5, §8).",
           ref("FetchRequest"),
           obj({"transaction": ref("Transaction")},
               {"objects": nullable({"type": "array", "items": {"type": "object"}}),
                "ids": nullable({"type": "array", "items": ref("ObjectId")}), "count": nullable(NONNEG),
                "related": nullable(ref("Related"))}),
           errors=[-32014, -32018, -32800]),
    method("store/count", "The number of objects matching a fetch request.", ref("FetchRequest"),
           obj({"count": NONNEG}), errors=[-32014, -32800]),
    method("store/get", "Objects by id, null where an id does not exist.",
           obj({"ids": {"type": "array", "items": STRING}},
               {"properties": nullable({"type": "array", "items": STRING})}),
           obj({"objects": {"type": "array", "items": {"anyOf": [ref("Object"), NULL]}}})),
    method("store/save", "One atomic transaction of inserts, updates and deletes (DESIGN.md §6).",
           obj({}, {"inserted": {"type": "array", "items": ref("InsertedObject")},
                    "updated": {"type": "array", "items": ref("UpdatedObject")},
                    "deleted": {"type": "array", "items": ref("DeletedObject")},
                    "mergePolicy": nullable(ref("MergePolicy")), "author": nullable(STRING),
                    "saveId": nullable({"type": "string", "minLength": 1, "maxLength": 128,
                                        "description": "The client's name for this save: a save whose saveId "
                                                       "already committed is not applied again but answered "
                                                       "with its first answer (same ids, versions, "
                                                       "transaction), for as long as history keeps its "
                                                       "transaction."})}),
           obj({"ids": {"type": "object", "additionalProperties": ref("ObjectId")},
                "versions": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
                "transaction": ref("Transaction")}),
           errors=SAVE_ERRORS),
    method("store/observe", "Subscribes the session to store/didSave.",
           obj({}, {"entities": nullable({"type": "array", "items": STRING}), "includeValues": nullable(BOOL)}),
           obj({"observer": STRING})),
    method("store/unobserve", "Ends an observer.", obj({"observer": STRING}), NULL, errors=[-32013]),
    method("store/history", "The committed transactions after `since` (persistent history); for a key "
           "with a row-level scope, only the changes in its read scope, as its store/didSave heard them "
           "(transactions with none left out; -32602 on since for history recorded before a policy that reads "
           "new keys, -32018 for a read rule through a relationship).",
           obj({"since": NONNEG}, {"limit": nullable({"type": "integer", "minimum": 1})}),
           obj({"transactions": {"type": "array", "items": ref("TransactionRecord")}, "latest": ref("Transaction"),
                "oldest": ref("Transaction")})),
    method("store/batchInsert", "Inserts many objects of one entity in one transaction (find-or-create with "
           "onConflict: update).",
           obj({"entity": STRING, "objects": {"type": "array", "items": ref("Values")}},
               {"onConflict": nullable(ref("ConflictResolution")), "author": nullable(STRING),
                "workDoneToken": nullable(ref("Token"))}),
           obj({"inserted": NONNEG, "updated": NONNEG, "ignored": NONNEG, "transaction": ref("Transaction")}),
           errors=[-32010, -32011, -32800]),
    method("store/batchUpdate", "Sets values on every object matching a predicate, in one transaction.",
           obj({"entity": STRING, "values": ref("Values")},
               {"predicate": nullable(STRING), "arguments": nullable({"type": ["object", "array"]}),
                "author": nullable(STRING), "workDoneToken": nullable(ref("Token"))}),
           obj({"count": NONNEG, "transaction": ref("Transaction")}),
           errors=[-32010, -32011, -32014, -32800]),
    method("store/batchDelete", "Deletes every object matching a predicate, in one transaction; delete rules apply.",
           obj({"entity": STRING},
               {"predicate": nullable(STRING), "arguments": nullable({"type": ["object", "array"]}),
                "author": nullable(STRING), "workDoneToken": nullable(ref("Token"))}),
           obj({"count": NONNEG, "transaction": ref("Transaction")}),
           errors=[-32014, -32015, -32800]),
    method("results/subscribe", "A live, sorted, sectioned fetch (DESIGN.md §7). `request.limit`/`offset` keep a live "
           "window (deltas, count, snapshot and objects are the window's); `coalesceMs` > 0 folds the transactions of "
           "that many milliseconds into one results/didChange carrying `transactions: [first, last]`. A grouped request "
           "(groupBy, aggregates, having) keeps live groups: each row is a group's dictionary, its id `group:[values]`; "
           "`sectionKeyPath` may name a groupBy key; no cacheName. With `resume` (the transaction and digest of the "
           "results the client holds) the answer is `resumed: true` with `objects: []`, the current sections and, in "
           "`changed`, each row that may have moved, entered, left or changed since, with its index path or none; "
           "rows not named keep their relative order; `digest` is that of the whole current id list. Where history "
           "no longer reaches back, the answer is a full one with `resumed: false`.",
           obj({"request": ref("FetchRequest")},
               {"sectionKeyPath": nullable(STRING), "cacheName": nullable(STRING),
                "include": nullable({"enum": ["firstBatch", "all", "none"]}),
                "workDoneToken": nullable(ref("Token")),
                "coalesceMs": nullable({"type": "integer", "minimum": 0, "maximum": 60000}),
                "resume": nullable(ref("ResultsResume"))}),
           obj({"subscription": STRING, "seq": {"const": 0}, "transaction": ref("Transaction"), "count": NONNEG,
                "sections": {"type": "array", "items": ref("SectionInfo")},
                "objects": {"type": "array", "items": ref("Row")}},
               {"fromCache": nullable(BOOL), "related": nullable(ref("Related")), "resumed": nullable(BOOL),
                "digest": nullable(ref("Digest")), "changed": nullable({"type": "array", "items": ref("ResumedRow")})}),
           errors=[-32014, -32800]),
    method("results/objects", "A page of a subscription's objects by flat offset (batch faulting).",
           obj({"subscription": STRING, "offset": NONNEG, "length": NONNEG}),
           obj({"seq": NONNEG, "objects": {"type": "array", "items": ref("Row")}},
               {"related": nullable(ref("Related"))}), errors=[-32013]),
    method("results/snapshot", "The whole ordered id list and sections, for resync.",
           obj({"subscription": STRING}),
           obj({"seq": NONNEG, "transaction": ref("Transaction"),
                "sections": {"type": "array", "items": ref("SectionInfo")},
                "ids": {"type": "array", "items": {"anyOf": [ref("ObjectId"), ref("GroupId")]}}}),
           errors=[-32013]),
    method("results/unsubscribe", "Ends a subscription.", obj({"subscription": STRING}), NULL, errors=[-32013]),
    method("results/deleteCache", "Removes a named cache, or every cache when no name is given.",
           obj({}, {"cacheName": nullable(STRING)}), NULL),
    method("server/stats", "What the daemon is doing now: sessions (a page of them), shared result sets, writer "
           "queue, latency percentiles, store size, last transaction (DESIGN.md §12).",
           obj({}, {"sessionLimit": nullable({"type": "integer", "minimum": 1, "maximum": 10000}),
                    "sessionsAfter": nullable(STRING)}),
           obj({"server": obj({"name": STRING, "version": STRING, "uptimeSeconds": NUMBER,
                               "endpoints": {"type": "array", "items": STRING}},
                              {"sessionCount": nullable(NONNEG), "maxSessions": nullable(NONNEG),
                               "maxSessionsRequested": nullable(NONNEG), "openFileLimit": nullable(NONNEG),
                               "ioThreads": nullable(NONNEG), "listenBacklog": nullable(NONNEG)}),
                "sessions": {"type": "array", "items": obj(
                    {"id": STRING, "subscriptions": NONNEG, "observers": NONNEG, "inFlight": NONNEG,
                     "outboundBacklog": NONNEG, "idleSeconds": NUMBER},
                    {"client": nullable(ref("ImplementationInfo")), "key": nullable(STRING),
                     "role": nullable(STRING),
                     "scope": nullable({"type": "object", "additionalProperties": obj(
                         {}, {"read": STRING, "write": STRING})})})},
                "subscriptions": {"type": "array", "items": obj(
                    {"request": {"type": "object"}, "rows": NONNEG, "sections": NONNEG,
                     "transaction": ref("Transaction"), "subscriptionIds": {"type": "array", "items": STRING},
                     "sessions": NONNEG, "notificationsSent": NONNEG},
                    {"sectionKeyPath": nullable(STRING), "cacheName": nullable(STRING)})},
                "notificationsSent": {"type": "object", "additionalProperties": NONNEG},
                "writer": obj({"queueDepth": NONNEG, "commits": NONNEG}),
                "latency": obj({"commit": ref("Percentiles"), "delta": ref("Percentiles")}),
                "store": obj({"path": STRING, "sizeBytes": NONNEG, "walBytes": NONNEG,
                              "transaction": ref("Transaction")},
                             {"lastTransaction": nullable(obj(
                                 {"transaction": ref("Transaction"),
                                  "timestamp": {"type": "string", "format": "date-time"},
                                  "counts": {"type": "object", "additionalProperties": obj(
                                      {"inserted": NONNEG, "updated": NONNEG, "deleted": NONNEG})}},
                                 {"author": nullable(STRING)}))})},
               {"nextSessionsAfter": nullable(STRING),
                "storeReads": nullable(obj({"commits": NONNEG, "snapshot": NONNEG, "changedRows": NONNEG,
                                            "relationship": NONNEG, "windowRefill": NONNEG,
                                            "include": NONNEG}))})),
    method("server/backup", "Writes a consistent copy of the embedded store (objects, model, history, save ids) "
           "as of one transaction into a directory on the daemon's host, while the daemon serves; "
           "`depotd --data-dir` on it serves the copy (DESIGN.md §12). Admin. Refused (-32600) on a PostgreSQL "
           "cluster: back it up with pg_dump.",
           obj({"destination": {"type": "string", "minLength": 1}}, {"workDoneToken": nullable(ref("Token"))}),
           obj({"transaction": ref("Transaction"), "path": STRING, "sizeBytes": NONNEG}), errors=[-32800]),
]

NOTIFICATIONS: Dict[str, Dict[str, Any]] = {
    "$/cancelRequest": {"direction": "client to server",
                        "params": obj({"id": ref("RequestId")})},
    "$/progress": {"direction": "server to client",
                   "params": obj({"token": ref("Token"),
                                  "value": {"anyOf": [ref("WorkDoneProgress"), ref("PartialResult")]}})},
    "store/didSave": {"direction": "server to client",
                      "params": obj({"transaction": ref("Transaction"), "changes": ref("Changes")},
                                    {"observer": nullable(STRING), "author": nullable(STRING),
                                     "objects": nullable({"type": "object", "additionalProperties": ref("Object")})})},
    "store/observeDidEnd": {"direction": "server to client",
                            "params": obj({"observer": STRING,
                                           "reason": {"type": "string", "description":
                                                      "error (the observer's row-level scope could not be "
                                                      "evaluated; it is removed and no store/didSave for it follows: "
                                                      "observe again and fetch)"},
                                           "message": STRING},
                                          {"transaction": nullable(ref("Transaction"))})},
    "results/didChange": {"direction": "server to client",
                          "params": obj({"subscription": STRING, "seq": {"type": "integer", "minimum": 1},
                                         "transaction": ref("Transaction"),
                                         "sections": {"type": "array", "items": ref("SectionChange")},
                                         "objects": {"type": "array", "items": ref("ObjectChange")}},
                                        {"transactions": nullable({"type": "array", "items": ref("Transaction"),
                                                                   "minItems": 2, "maxItems": 2}),
                                         "related": nullable(ref("Related")),
                                         "relatedRemoved": nullable({"type": "array", "items": ref("ObjectId")})})},
    "results/didInvalidate": {"direction": "server to client",
                              "params": obj({"subscription": STRING,
                                             "reason": {"enum": ["overflow", "largeTransaction", "error",
                                                                 "rebuilt", "scope", "model"], "description":
                                                        "overflow (the session's queue overflowed), largeTransaction "
                                                        "(one transaction changed more than 10,000 objects), error "
                                                        "(the daemon could not follow a transaction; the set was "
                                                        "rebuilt, or dropped when that failed too), rebuilt (a "
                                                        "cluster daemon rebuilt its replica from the cluster's "
                                                        "snapshot: its log was pruned past it, or it diverged): "
                                                        "resync with results/snapshot; scope (SIGHUP changed the "
                                                        "key's row-level scope; the subscription ended): subscribe "
                                                        "again; model (a migration renamed an entity or key the "
                                                        "request names, or the request no longer fits the model; "
                                                        "the subscription ended): subscribing again with the same "
                                                        "request fails, naming the key"}})},
}


def used_definitions(schema: Any, found: Optional[set] = None) -> set:
    """The names of the components a schema refers to, transitively."""
    found = set() if found is None else found
    if isinstance(schema, dict):
        target = schema.get("$ref", "")
        if target.startswith("#/components/schemas/"):
            name = target.rsplit("/", 1)[1]
            if name not in found:
                found.add(name)
                used_definitions(SCHEMAS[name], found)
        for value in schema.values():
            used_definitions(value, found)
    elif isinstance(schema, list):
        for value in schema:
            used_definitions(value, found)
    return found


def standalone(schema: Dict[str, Any], title: str, description: str) -> Dict[str, Any]:
    """A self-contained JSON Schema (refs rewritten to its own $defs)."""
    defs = {name: SCHEMAS[name] for name in sorted(used_definitions(schema))}
    text = json.dumps({"$schema": SCHEMA_DIALECT, "title": title, "description": description, **schema,
                       "$defs": defs})
    return json.loads(text.replace("#/components/schemas/", "#/$defs/"))


def message_schema(method_name: str, params: Dict[str, Any]) -> Dict[str, Any]:
    return {"type": "object", "required": ["jsonrpc", "method", "params"], "additionalProperties": False,
            "properties": {"jsonrpc": {"const": "2.0"}, "method": {"const": method_name}, "params": params}}


def build() -> Dict[str, str]:
    """Every file's path (relative to proto/) and text."""
    document = {
        "openrpc": "1.3.2",
        "info": {"title": "Depot", "version": "1",
                 "description": "depotd's JSON-RPC 2.0 API over ZeroMQ ROUTER/DEALER (DESIGN.md). Params are "
                                "named (an object). `x-params-schema` is the params object's whole schema; "
                                "`x-notifications` lists the notifications, whose JSON Schemas are in schemas/."},
        "servers": [{"name": "default", "url": "ipc://./depot-data/depot.sock"}],
        "methods": METHODS,
        "components": {"schemas": SCHEMAS,
                       "errors": {f"E{-code}": {"code": code, "message": text} for code, text in ERRORS.items()}},
        "x-notifications": [{"name": name, "direction": spec["direction"], "params": spec["params"],
                             "schema": f"schemas/{file_name(name)}"} for name, spec in NOTIFICATIONS.items()],
        "x-error-data": {str(code): ref(f"ErrorData{-code}") for code in ERROR_DATA},
    }
    files = {"depot.openrpc.json": document}
    for name, spec in NOTIFICATIONS.items():
        files[f"schemas/{file_name(name)}"] = standalone(
            message_schema(name, spec["params"]), name, f"The {name} notification ({spec['direction']}).")
    files["schemas/error.json"] = standalone(
        {"type": "object", "required": ["jsonrpc", "id", "error"], "additionalProperties": False,
         "properties": {"jsonrpc": {"const": "2.0"}, "id": {"anyOf": [ref("RequestId"), NULL]},
                        "error": ref("ErrorObject")}},
        "error response", "A JSON-RPC error response.")
    return {path: json.dumps(content, indent=2, sort_keys=False) + "\n" for path, content in files.items()}


def file_name(notification: str) -> str:
    return notification.replace("$/", "").replace("/", ".") + ".json"


def main() -> None:
    for path, text in build().items():
        target = HERE / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print("wrote", target.relative_to(HERE.parent))


if __name__ == "__main__":
    main()
