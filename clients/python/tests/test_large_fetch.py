"""Async fetches of any size: ``fetch_async`` and ``AsyncClient.fetch`` stream by themselves.

A plain ``store/fetch`` is capped at 100,000 objects by default; the clients' async fetches
ask for ``$/progress`` chunks with a ``partialResultToken`` of their own, so 300,000 objects
arrive, in order, with progress, and can be cancelled.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, Iterator, List

import pytest

import depot
from conftest import Daemon, TEST_MODEL

COUNT = 300_000
CHUNK = 50_000


def name(index: int) -> str:
    return f"item {index:06d}"


@pytest.fixture(scope="module")
def big() -> Iterator[Daemon]:
    """A daemon holding 300,000 items (store/batchInsert in chunks of 50,000)."""
    running = Daemon()
    try:
        # Unrecorded: test_proto would otherwise keep (and validate) every streamed object.
        with running.client(recorder=None, timeout=120) as client:
            client.call("model/define", TEST_MODEL)
            for start in range(0, COUNT, CHUNK):
                result = client.call("store/batchInsert", {"entity": "Item", "objects": [
                    {"name": name(i), "createdAt": "2026-01-01T00:00:00.000Z", "done": i % 3 == 0}
                    for i in range(start, start + CHUNK)]})
                assert result["inserted"] == CHUNK
        yield running
    finally:
        running.stop()


REQUEST: Dict[str, Any] = {"entity": "Item", "sort": [{"key": "name"}], "batchSize": 5_000}


def test_a_plain_fetch_of_this_size_is_refused(big: Daemon) -> None:
    with big.client(recorder=None, timeout=120) as client:
        with pytest.raises(depot.InvalidParamsError) as raised:
            client.call("store/fetch", REQUEST)
        assert "partialResultToken" in str(raised.value)


def test_fetch_async_streams_three_hundred_thousand_objects_with_progress(big: Daemon) -> None:
    with big.client(recorder=None, timeout=120) as client:
        reports: List[Dict[str, Any]] = []
        chunks: List[int] = []
        first_seen_while_running: List[bool] = []
        call: Any = None
        started = threading.Event()

        def on_objects(objects: List[Any]) -> None:
            started.wait(5)
            if not chunks:
                first_seen_while_running.append(not call.done())
            chunks.append(len(objects))
        call = client.fetch_async(REQUEST, progress=reports.append, on_objects=on_objects)
        started.set()
        result = call.result(120)
        objects = result["objects"]
        assert result["count"] == COUNT and len(objects) == COUNT
        assert [o["name"] for o in objects[:3]] == [name(0), name(1), name(2)]
        assert all(objects[i]["name"] == name(i) for i in range(0, COUNT, 997)), "in the request's order"
        assert len({o["id"] for o in objects}) == COUNT, "no object twice"
        assert objects[123_456]["done"] is (123_456 % 3 == 0)
        assert isinstance(result["transaction"], int)
        # Chunks of batchSize, as they arrived, the first while the fetch still ran.
        assert sum(chunks) == COUNT and len(chunks) == COUNT // 5_000
        assert first_seen_while_running == [True]
        # Progress: begin with the total (countFirst), reports that only rise, end at the count.
        assert reports[0]["kind"] == "begin" and reports[0]["total"] == COUNT
        assert reports[-1]["kind"] == "end" and reports[-1]["completed"] == COUNT
        completed = [r["completed"] for r in reports if r["kind"] == "report"]
        assert len(completed) > 10 and completed == sorted(completed)

        # ids stream the same way; client.fetch waits for the whole answer.
        ids = client.fetch({**REQUEST, "resultType": "ids", "batchSize": 50_000})
        assert ids["ids"] == [o["id"] for o in objects]
        assert "objects" not in ids

        # Cancel once objects flow: CancelledError, and the client stays usable.
        arrived = threading.Event()
        running = client.fetch_async({**REQUEST, "batchSize": 1_000}, on_objects=lambda objects: arrived.set())
        assert arrived.wait(60)
        running.cancel()
        with pytest.raises(depot.CancelledError):
            running.result(60)
        assert client.call("store/count", {"entity": "Item"})["count"] == COUNT


def test_async_client_fetch_streams_the_same_way(big: Daemon) -> None:
    async def main() -> None:
        async with await depot.AsyncClient.connect(big.endpoint, timeout=120) as client:
            reports: List[Dict[str, Any]] = []
            sizes: List[int] = []

            async def on_objects(objects: List[Any]) -> None:
                sizes.append(len(objects))
            result = await client.fetch({**REQUEST, "predicate": "done == YES"}, progress=reports.append,
                                        on_objects=on_objects)
            objects = result["objects"]
            assert len(objects) == COUNT // 3 and result["count"] == COUNT // 3
            assert all(o["done"] for o in objects)
            assert [o["name"] for o in objects[:2]] == [name(0), name(3)]
            assert sum(sizes) == COUNT // 3 and len(sizes) > 1
            assert reports[0]["total"] == COUNT // 3 and reports[-1]["kind"] == "end"
            whole = await client.fetch(REQUEST)
            assert len(whole["objects"]) == COUNT
            assert whole["objects"][-1]["name"] == name(COUNT - 1)
    asyncio.run(main())
