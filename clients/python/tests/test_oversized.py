"""A message over the daemon's --max-message-size is refused by the client, which says why at once."""

from __future__ import annotations

import asyncio
import time

import pytest

import depot
from conftest import Daemon


@pytest.fixture(scope="module")
def small() -> Daemon:
    running = Daemon("--max-message-size", "100000")
    yield running
    running.stop()


def test_sync_client_refuses_an_oversized_request_and_goes_on(small: Daemon) -> None:
    with small.client() as client:
        assert client.capabilities["maxMessageSize"] == 100000
        started = time.monotonic()
        with pytest.raises(depot.MessageTooLargeError) as refused:
            client.call("store/save", {"inserted": [{"entity": "Nope", "values": {"text": "x" * 200000}}]})
        assert time.monotonic() - started < 2
        assert "store/save" in str(refused.value) and "100000" in str(refused.value)
        assert client.call("ping") == {}


def test_async_client_refuses_an_oversized_request(small: Daemon) -> None:
    async def run() -> None:
        client = await depot.AsyncClient.connect(small.endpoint, timeout=10)
        try:
            with pytest.raises(depot.MessageTooLargeError):
                await client.call("store/save", {"inserted": [{"entity": "Nope", "values": {"text": "x" * 200000}}]})
            assert await client.call("ping") == {}
        finally:
            await client.close()

    asyncio.run(run())
