"""The Python client against a real depotd: calls, typed errors, notifications, heartbeat, progress, cancel."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Dict, List

import pytest
import zmq

import depot
from conftest import Daemon


def test_initialize_reports_the_server_and_call_round_trips(client: depot.Client) -> None:
    assert client.server_info["serverInfo"]["name"] == "depotd"
    assert client.server_info["protocolVersion"] == "1"
    assert client.session_id
    result = client.save(inserted=[{"entity": "Team", "tempId": "t", "values": {
        "teamName": "Brazil", "qualifyingZone": "South America", "wins": 5}}])
    team_id = result["ids"]["t"]
    assert result["versions"][team_id] == 1
    fetched = client.fetch({"entity": "Team", "sort": [{"key": "teamName"}]})
    brazil = [o for o in fetched["objects"] if o["id"] == team_id]
    assert brazil and brazil[0]["teamName"] == "Brazil" and brazil[0]["entity"] == "Team"
    assert client.call("store/get", {"ids": [team_id, "Team/999999"]})["objects"][1] is None


def test_context_manager_closes_and_a_closed_client_refuses_calls(daemon: Daemon) -> None:
    with daemon.client() as client:
        client.ping()
    assert client.closed
    with pytest.raises(depot.ConnectionClosedError):
        client.call("ping")


def test_concurrent_calls_from_many_threads_each_get_their_own_answer(client: depot.Client) -> None:
    answers: List[Any] = []
    errors: List[BaseException] = []

    def work(n: int) -> None:
        try:
            for _ in range(20):
                answers.append(client.call("store/fetch", {"entity": "Team", "limit": n, "resultType": "ids"}))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert len(answers) == 160 and all("ids" in a for a in answers)


def raw_socket(endpoint: str) -> zmq.Socket:
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


def raw_exchange(socket: zmq.Socket, payload: bytes) -> Dict[str, Any]:
    socket.send(payload)
    assert socket.poll(10000), "no answer"
    return json.loads(socket.recv())


def test_each_error_code_raises_its_typed_exception(client: depot.Client, daemon: Daemon) -> None:
    def raises(cls: type, method: str, params: Any) -> depot.DepotError:
        with pytest.raises(cls) as caught:
            client.call(method, params)
        assert isinstance(caught.value, depot.DepotError)
        assert caught.value.code == cls.CODE and caught.value.message
        return caught.value

    raises(depot.MethodNotFoundError, "nope/nothing", {})
    invalid = raises(depot.InvalidParamsError, "store/fetch", {"entity": "Nope"})
    assert invalid.field == "params.entity" and "Nope" in invalid.message
    raises(depot.InvalidRequestError, "initialize", {"protocolVersion": "1", "capabilities": {}})
    validation = raises(depot.ValidationError, "store/save",
                        {"inserted": [{"entity": "Team", "values": {"wins": "x"}}]})
    assert validation.errors and all("message" in e for e in validation.errors)
    client.save(inserted=[{"entity": "Team", "values": {"teamName": "Unique FC", "qualifyingZone": "Z"}}])
    raises(depot.UniqueConstraintError, "store/save",
           {"inserted": [{"entity": "Team", "values": {"teamName": "Unique FC", "qualifyingZone": "Z"}}]})
    saved = client.save(inserted=[{"entity": "Team", "tempId": "c",
                                   "values": {"teamName": "Conflict FC", "qualifyingZone": "Z"}}])
    team = saved["ids"]["c"]
    client.save(updated=[{"id": team, "version": 1, "values": {"wins": 1}}])
    conflict = raises(depot.MergeConflictError, "store/save",
                      {"updated": [{"id": team, "version": 1, "values": {"wins": 2}}]})
    assert conflict.conflicts and conflict.conflicts[0]["id"] == team
    raises(depot.NotFoundError, "store/unobserve", {"observer": "no-such-observer"})
    raises(depot.PredicateSyntaxError, "store/fetch", {"entity": "Team", "predicate": "wins >"})
    owner = client.save(inserted=[{"entity": "Owner", "tempId": "o", "values": {"name": "Ann"}},
                                  {"entity": "Pet", "values": {"name": "Rex", "owner": "o"}}])["ids"]["o"]
    raises(depot.DeleteDeniedError, "store/save", {"deleted": [{"id": owner}]})
    model = client.call("model/get")
    changed = json.loads(json.dumps({"entities": model["entities"]}))
    next(a for e in changed["entities"] if e["name"] == "Team" for a in e["attributes"]
         if a["name"] == "teamName")["type"] = "integer"
    raises(depot.MigrationRefusedError, "model/define", changed)
    # Errors without a session or without an id, on a raw socket.
    socket = raw_socket(daemon.endpoint)
    try:
        answer = raw_exchange(
            socket, b'{"jsonrpc": "2.0", "id": 1, "method": "store/count", "params": {"entity": "Team"}}')
        assert isinstance(depot.error_from_json(answer["error"]), depot.NotInitializedError)
        answer = raw_exchange(socket, b'{"jsonrpc": "2.0", "id": ')
        assert isinstance(depot.error_from_json(answer["error"]), depot.ParseError)
    finally:
        socket.close(0)


def test_error_from_json_maps_every_code_of_the_design() -> None:
    codes = {-32700: depot.ParseError, -32600: depot.InvalidRequestError, -32601: depot.MethodNotFoundError,
             -32602: depot.InvalidParamsError, -32603: depot.InternalError, -32002: depot.NotInitializedError,
             -32800: depot.CancelledError, -32802: depot.ServerCancelledError, -32010: depot.ValidationError,
             -32011: depot.UniqueConstraintError, -32012: depot.MergeConflictError, -32013: depot.NotFoundError,
             -32014: depot.PredicateSyntaxError, -32015: depot.DeleteDeniedError,
             -32016: depot.MigrationRefusedError, -32017: depot.OverloadedError}
    for code, cls in codes.items():
        error = depot.error_from_json({"code": code, "message": "m", "data": {"x": 1}})
        assert type(error) is cls and error.code == code and error.data == {"x": 1}
    assert type(depot.error_from_json({"code": -1, "message": "?"})) is depot.DepotError


def test_observers_get_did_save_before_the_save_returns(daemon: Daemon) -> None:
    with daemon.client() as watcher, daemon.client() as writer:
        seen: List[Dict[str, Any]] = []
        watcher.on_notification("store/didSave", lambda method, params: seen.append(params))
        own: List[Dict[str, Any]] = []
        writer.on_notification("store/didSave", lambda method, params: own.append(params))
        watcher.call("store/observe", {"entities": ["Team"]})
        writer.call("store/observe", {"entities": ["Team"]})
        result = writer.save(inserted=[{"entity": "Team", "tempId": "n", "values": {
            "teamName": "Observed FC", "qualifyingZone": "Z"}}], author="test")
        # Delivery order: the committing session's notification came before its response.
        assert [n["transaction"] for n in own] == [result["transaction"]]
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen and seen[0]["transaction"] == result["transaction"]
        assert seen[0]["changes"]["Team"]["inserted"] == [result["ids"]["n"]]


def test_heartbeat_keeps_an_idle_session_alive() -> None:
    running = Daemon("--heartbeat-interval", "0.4")
    try:
        with running.client() as client:
            assert client.server_info["heartbeatInterval"] == pytest.approx(0.4)
            time.sleep(2.0)  # Five intervals: without pings the session would expire after three.
            assert client.call("store/count", {"entity": "Nothing"}, timeout=5) is not None
    except depot.InvalidParamsError:
        pass  # No model: the session answered, which is what counts.
    finally:
        running.stop()


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_without_heartbeat_an_idle_session_expires() -> None:
    running = Daemon("--heartbeat-interval", "0.3")
    try:
        with running.client(heartbeat=False) as client:
            time.sleep(2.0)
            with pytest.raises(depot.NotInitializedError):
                client.call("model/get", timeout=5)
            # The lost session is being reopened in the background; with the daemon gone, that
            # `initialize` is still waiting when the client closes.
            running.stop()
            time.sleep(0.3)
        # The reopening thread ends quietly (it used to die on ConnectionClosedError, unhandled).
        for thread in threading.enumerate():
            if thread.name == "depot-recover":
                thread.join(10)
    finally:
        running.stop()


@pytest.fixture(scope="module")
def many_items(daemon: Daemon) -> int:
    """20,000 Items, so that a fetch takes long enough to report progress and be cancelled."""
    with daemon.client() as client:
        for start in range(0, 20000, 5000):
            client.save(inserted=[
                {"entity": "Item", "values": {"name": f"item {i}", "createdAt": "2026-01-01T00:00:00Z"}}
                for i in range(start, start + 5000)])
    return 20000


def test_fetch_reports_progress_begin_reports_end(client: depot.Client, many_items: int) -> None:
    if not client.capabilities.get("progress"):
        pytest.skip("the daemon does not announce the progress capability")
    values: List[Dict[str, Any]] = []
    result = client.fetch({"entity": "Item", "batchSize": 500, "resultType": "ids"}, progress=values.append)
    assert len(result["ids"]) == many_items
    kinds = [v["kind"] for v in values]
    assert kinds[0] == "begin" and kinds[-1] == "end" and set(kinds[1:-1]) <= {"report"}
    assert values[0]["title"] == "Fetching Item"
    assert values[-1]["completed"] == many_items and values[-1]["cancelled"] is False
    completed = [v["completed"] for v in values if v["kind"] == "report"]
    assert completed == sorted(completed)


def test_cancel_stops_a_fetch_with_cancelled_error(client: depot.Client, many_items: int) -> None:
    if not client.capabilities.get("cancellation"):
        pytest.skip("the daemon does not announce the cancellation capability")
    for _ in range(5):
        ends: List[Dict[str, Any]] = []
        call = client.fetch_async({"entity": "Item", "batchSize": 50},
                                  progress=lambda v: ends.append(v) if v["kind"] == "end" else None)
        call.cancel()
        try:
            call.result(30)
        except depot.CancelledError as error:
            assert error.code == -32800
            assert ends and ends[-1]["cancelled"] is True
            break
    else:
        pytest.fail("five fetches of 20,000 objects all finished before their $/cancelRequest arrived")
    assert client.call("store/count", {"entity": "Item"})["count"] == many_items


def test_async_client_calls_errors_progress_and_cancel(daemon: Daemon, many_items: int) -> None:
    import asyncio
    from conftest import TRAFFIC

    async def main() -> None:
        async with await depot.AsyncClient.connect(daemon.endpoint, recorder=TRAFFIC.recorder(), timeout=20) as client:
            assert client.server_info["serverInfo"]["name"] == "depotd"
            count = await client.call("store/count", {"entity": "Item"})
            assert count["count"] == many_items
            with pytest.raises(depot.InvalidParamsError):
                await client.call("store/fetch", {"entity": "Nope"})
            values: List[Dict[str, Any]] = []
            result = await client.fetch({"entity": "Item", "resultType": "count"}, progress=values.append)
            assert result["count"] == many_items and values[-1]["kind"] == "end"
            saves: List[Any] = []
            client.on_notification("store/didSave", lambda m, p: saves.append(p))
            await client.call("store/observe", {"entities": ["Team"]})
            saved = await client.call("store/save", {"inserted": [{"entity": "Team", "values": {
                "teamName": "Async FC", "qualifyingZone": "Z"}}]})
            assert [s["transaction"] for s in saves] == [saved["transaction"]]
            task = asyncio.ensure_future(client.fetch({"entity": "Item", "batchSize": 50}))
            await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await client.call("ping")) == {}
    asyncio.run(main())


def test_count_first_puts_the_total_in_begin(client: depot.Client, many_items: int) -> None:
    values: List[Dict[str, Any]] = []
    client.fetch({"entity": "Item", "countFirst": True, "resultType": "count"}, progress=values.append)
    assert values[0]["kind"] == "begin" and values[0]["total"] == many_items
