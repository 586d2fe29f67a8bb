"""The Python client as people use it: a printable table, callback errors that surface, the
subscription default, a progress total, and modules without an import cycle."""

from __future__ import annotations

import ast
import pathlib
import time
from typing import Any, Dict, List

import pytest

import depot
from conftest import Daemon

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "depot"
REQUEST = {"entity": "Team", "predicate": "qualifyingZone BEGINSWITH 'Usage'",
           "sort": [{"key": "qualifyingZone"}, {"key": "teamName"}]}


def insert_teams(client: depot.Client, count: int, zone: str = "Usage") -> None:
    client.save(inserted=[{"entity": "Team", "values": {"teamName": f"{zone} team {i:03}", "qualifyingZone": zone,
                                                        "wins": i}} for i in range(count)])


def test_as_table_returns_a_printable_table(daemon: Daemon) -> None:
    with daemon.client() as client:
        insert_teams(client, 3, "Usage A")
        with client.subscribe(REQUEST, section_key_path="qualifyingZone") as results:
            table = results.as_table(["teamName", "wins"])
            assert isinstance(table, str)
            lines = table.splitlines()
            assert lines[0].split() == ["id", "teamName", "wins"]
            assert set(lines[1]) <= {"-", " "}
            assert lines[2] == "== Usage A =="
            assert "Usage A team 002" in lines[5] and lines[5].rstrip().endswith("2")
            # Columns line up: every value starts where its header does.
            assert lines[3].index("Usage A team 000") == lines[0].index("teamName")
            everything = results.as_table()
            assert "qualifyingZone" in everything.splitlines()[0]


def test_format_table_without_sections_and_with_long_values() -> None:
    text = depot.format_table([("", [{"id": "T/1", "name": "x" * 100, "n": None}])], sectioned=False, max_width=10)
    assert text.splitlines() == ["id   name        n", "---  ----------  -", "T/1  xxxxxxxxx…"]


def test_a_callback_error_surfaces_from_the_next_call(daemon: Daemon) -> None:
    with daemon.client() as client, daemon.client() as writer:
        insert_teams(writer, 1, "Usage B")
        with client.subscribe(REQUEST) as results:
            def broken(results: depot.FetchedResults, change: Any) -> None:
                raise TypeError("my callback is broken")
            results.on_change(broken)
            saved = writer.save(inserted=[{"entity": "Team", "values": {"teamName": "Usage B late",
                                                                          "qualifyingZone": "Usage B"}}])
            assert results.wait_for_transaction(saved["transaction"])
            deadline = time.monotonic() + 10
            while not client.callback_errors and time.monotonic() < deadline:
                time.sleep(0.01)
            with pytest.raises(depot.CallbackError) as raised:
                client.ping()
            assert isinstance(raised.value.__cause__, TypeError)
            assert "my callback is broken" in str(raised.value)
            assert "results/didChange" in raised.value.where
            client.ping()  # Raised once; the client keeps working.
            assert len(client.callback_errors) == 1


def test_subscribe_defaults_to_first_batch_and_still_loads_everything(daemon: Daemon) -> None:
    sent: List[Any] = []
    with daemon.client(recorder=lambda direction, message: sent.append(message) if direction == "send" else None,
                       ) as client:
        insert_teams(client, 5, "Usage C")
        with client.subscribe({**REQUEST, "batchSize": 2}) as results:
            subscribe = [m for m in sent if isinstance(m, dict) and m.get("method") == "results/subscribe"]
            assert subscribe[0]["params"]["include"] == "firstBatch"
            fetched = client.fetch(REQUEST)["objects"]
            assert [o["id"] for o in results.fetched_objects] == [o["id"] for o in fetched]


def test_fetch_async_progress_has_a_total(daemon: Daemon) -> None:
    with daemon.client() as client:
        insert_teams(client, 4, "Usage D")
        reports: List[Dict[str, Any]] = []
        result = client.fetch_async({"entity": "Team", "predicate": "qualifyingZone == 'Usage D'",
                                     "sort": [{"key": "teamName"}], "batchSize": 2},
                                    progress=reports.append).result()
        assert len(result["objects"]) == 4
        begin = [r for r in reports if r.get("kind") == "begin"]
        assert begin and begin[0].get("total") == 4, reports


def test_client_and_results_do_not_import_each_other() -> None:
    def imports(module: str) -> List[str]:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        names: List[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                names.append(node.module)
        return names
    assert "client" not in imports("results")
    assert "results" in imports("client")


def test_async_client_surfaces_callback_errors_and_asks_for_a_total(daemon: Daemon) -> None:
    import asyncio

    async def main() -> None:
        async with await depot.AsyncClient.connect(daemon.endpoint, timeout=20) as client:
            reports: List[Dict[str, Any]] = []
            await client.call("store/save", {"inserted": [{"entity": "Team", "values": {
                "teamName": f"Usage E {i}", "qualifyingZone": "Usage E"}} for i in range(3)]})
            await client.fetch({"entity": "Team", "predicate": "qualifyingZone == 'Usage E'"},
                               progress=reports.append)
            assert reports[0]["kind"] == "begin" and reports[0]["total"] == 3

            def broken(method: str, params: Any) -> None:
                raise KeyError("oops")
            client.on_notification("store/didSave", broken)
            await client.call("store/observe", {"entities": ["Team"]})
            with pytest.raises(depot.CallbackError) as raised:
                await client.call("store/save", {"inserted": [{"entity": "Team", "values": {
                    "teamName": "Usage E late", "qualifyingZone": "Usage E"}}]})
                await client.call("ping")
            assert isinstance(raised.value.__cause__, KeyError)
            assert (await client.call("ping")) == {}
    asyncio.run(main())
