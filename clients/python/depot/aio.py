"""The asyncio Depot client, on ``zmq.asyncio``.

The DEALER socket belongs to the event loop that connected it: every send and
receive happens on that loop, so no other thread may touch the client.

Example::

    async with await AsyncClient.connect("tcp://127.0.0.1:7000") as client:
        result = await client.call("store/count", {"entity": "Team"})
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Union

import zmq
import zmq.asyncio

from .client import PROTOCOL_VERSION, Recorder, __version__, check_size, grouped_request, streamed_key
from .errors import (CallbackError, CancelledError, ConnectionClosedError, DepotError, DepotTimeoutError,
                     MessageTooLargeError, error_from_json)
from .keys import apply_curve

__all__ = ["AsyncClient"]

logger = logging.getLogger("depot")

AsyncNotificationCallback = Callable[[str, Any], Union[None, Awaitable[None]]]


class AsyncClient:
    """A session with ``depotd`` for asyncio programs. Create it with :meth:`connect`."""

    def __init__(self, endpoint: str, *, timeout: float = 30.0, heartbeat: bool = True,
                 recorder: Optional[Recorder] = None, context: Optional[zmq.asyncio.Context] = None,
                 server_key: Optional[str] = None, key_file: Optional[str] = None) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._recorder = recorder
        self._heartbeat_enabled = heartbeat
        self._context = context or zmq.asyncio.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        try:
            apply_curve(self._socket, server_key, key_file)
        except ValueError:
            self._socket.close(0)
            raise
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._pending: Dict[Union[int, str], "asyncio.Future[Any]"] = {}
        self._listeners: Dict[str, List[AsyncNotificationCallback]] = {}
        self._progress: Dict[str, Callable[[Dict[str, Any]], Any]] = {}
        self._tasks: List["asyncio.Task[Any]"] = []
        #: Every exception your callbacks raised, oldest first; the next :meth:`call` raises each
        #: one not raised yet as :class:`~depot.errors.CallbackError`.
        self.callback_errors: List[CallbackError] = []
        self._unraised_callback_errors: List[CallbackError] = []
        self._closed = False
        self._last_sent = 0.0
        #: ``initialize``'s result.
        self.server_info: Dict[str, Any] = {}
        self.session_id = ""
        self.capabilities: Dict[str, Any] = {}
        self.heartbeat_interval: Optional[float] = None

    @classmethod
    async def connect(cls, endpoint: str, *, client_name: str = "depot-python-asyncio",
                      **options: Any) -> "AsyncClient":
        """Connects to ``endpoint``, sends ``initialize`` and starts the reader and heartbeat tasks."""
        client = cls(endpoint, **options)
        try:
            client._socket.connect(endpoint)
        except zmq.ZMQError as error:
            client._socket.close(0)
            raise ConnectionClosedError(f"cannot connect to {endpoint!r}: {error}") from error
        client._tasks.append(asyncio.ensure_future(client._read_loop()))
        try:
            info = await client.call("initialize", {
                "clientInfo": {"name": client_name, "version": __version__},
                "protocolVersion": PROTOCOL_VERSION, "capabilities": {}})
        except BaseException:
            await client._shutdown()
            raise
        client.server_info = info
        client.session_id = info.get("sessionId", "")
        client.capabilities = info.get("capabilities", {})
        client.heartbeat_interval = float(info.get("heartbeatInterval") or 0) or None
        if client._heartbeat_enabled and client.heartbeat_interval:
            client._tasks.append(asyncio.ensure_future(client._heartbeat_loop(client.heartbeat_interval / 2)))
        return client

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Sends ``disconnect`` and stops the tasks."""
        if self._closed:
            return
        try:
            await self.call("disconnect", None, timeout=2.0)
        except Exception:  # The daemon may be gone; closing must still work.
            pass
        await self._shutdown()

    async def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
                   timeout: Optional[float] = None, request_id: Union[int, str, None] = None) -> Any:
        """Calls ``method`` and returns its result.

        Cancelling the awaiting task sends ``$/cancelRequest`` for the request.

        Raises:
            DepotError: the daemon's error, typed by code.
            DepotTimeoutError: no answer within ``timeout``.
        """
        if self._closed:
            raise ConnectionClosedError(f"the client of {self.endpoint} is closed")
        rid = next(self._ids) if request_id is None else request_id
        future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        message: Dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._send(message)
        except MessageTooLargeError:
            self._pending.pop(rid, None)
            raise
        limit = self.timeout if timeout is None else timeout
        try:
            result = await asyncio.wait_for(asyncio.shield(future), limit)
            if self._unraised_callback_errors:
                raise self._unraised_callback_errors.pop(0)
            return result
        except asyncio.TimeoutError:
            raise DepotTimeoutError(
                f"no answer to {method} from {self.endpoint} within {limit:g}s: is depotd running at that endpoint?"
            ) from None
        except asyncio.CancelledError:
            if not future.done() and not self._closed:
                await self.notify("$/cancelRequest", {"id": rid})
            raise
        finally:
            if future.done():
                self._pending.pop(rid, None)

    async def notify(self, method: str, params: Optional[Mapping[str, Any]] = None) -> None:
        """Sends a notification."""
        message: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    def on_notification(self, method: str, callback: AsyncNotificationCallback) -> Callable[[], None]:
        """Calls ``callback(method, params)`` (a function or coroutine function) per notification; ``"*"`` for all."""
        self._listeners.setdefault(method, []).append(callback)
        return lambda: self._listeners.get(method, []).remove(callback)

    def new_token(self, prefix: str = "aio") -> str:
        """A fresh token for ``workDoneToken``."""
        return f"{prefix}-{self.session_id}-{next(self._tokens)}"

    async def fetch(self, request: Mapping[str, Any], *,
                    progress: Optional[Callable[[Dict[str, Any]], Any]] = None,
                    on_objects: Optional[Callable[[List[Any]], Any]] = None,
                    timeout: Optional[float] = None, group_by: Optional[Sequence[str]] = None,
                    aggregates: Optional[Sequence[Mapping[str, Any]]] = None,
                    having: Optional[str] = None) -> Dict[str, Any]:
        """``store/fetch`` of any size; ``progress`` gets each work-done value. Cancel the task to cancel the fetch.

        As :meth:`depot.Client.fetch_async`, the objects (or ids) stream in chunks of ``batchSize``
        under a ``partialResultToken`` of the client's own, so the daemon's cap on one answer does
        not apply; ``on_objects`` (a function or coroutine function) gets each chunk as it arrives,
        and the answer has them all, in order. ``group_by``, ``aggregates`` and ``having`` make it a
        grouped fetch, as in :meth:`depot.Client.fetch`.

        Raises:
            CancelledError: the daemon cancelled the fetch (after ``$/cancelRequest``).
        """
        params = grouped_request(request, group_by, aggregates, having)
        keys: List[str] = []
        if progress is not None:
            params.setdefault("countFirst", True)
            token = params.setdefault("workDoneToken", self.new_token("fetch"))
            keys.append(json.dumps(token, sort_keys=True))
            self._progress[keys[-1]] = progress
        result_key = streamed_key(params)
        gathered: List[Any] = []
        if result_key is not None:
            params["partialResultToken"] = self.new_token("objects")

            async def chunk(value: Dict[str, Any]) -> None:
                items = value.get("objects") or []
                gathered.extend(items)
                if on_objects is not None and items:
                    outcome = on_objects(items)
                    if inspect.isawaitable(outcome):
                        await outcome
            keys.append(json.dumps(params["partialResultToken"], sort_keys=True))
            self._progress[keys[-1]] = chunk
        try:
            result: Dict[str, Any] = await self.call("store/fetch", params, timeout=timeout)
            # Every chunk was dispatched before the answer (wire order).
            if result_key is not None and isinstance(result, dict):
                result.pop("objects", None)
                result[result_key] = gathered
            return result
        finally:
            for key in keys:
                self._progress.pop(key, None)

    # -- internals -----------------------------------------------------------------------

    async def _send(self, message: Any) -> None:
        data = json.dumps(message, separators=(",", ":")).encode()
        check_size(data, message, self.capabilities)
        self._record("send", data)
        self._last_sent = asyncio.get_running_loop().time()
        await self._socket.send(data)

    def _record(self, direction: str, data: bytes) -> None:
        if self._recorder is not None:
            try:
                self._recorder(direction, json.loads(data))
            except Exception:
                logger.exception("recorder failed")

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._socket.recv()
                self._record("receive", data)
                try:
                    message = json.loads(data)
                except ValueError:
                    logger.error("invalid JSON from depotd: %r", data[:200])
                    continue
                for element in message if isinstance(message, list) else [message]:
                    if isinstance(element, dict):
                        await self._dispatch(element)
        except (asyncio.CancelledError, zmq.ZMQError):
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionClosedError(f"the client of {self.endpoint} closed"))

    async def _dispatch(self, message: Dict[str, Any]) -> None:
        if "method" in message:
            method, params = message["method"], message.get("params")
            if method == "$/progress" and isinstance(params, dict):
                callback = self._progress.get(json.dumps(params.get("token"), sort_keys=True))
                if callback is not None:
                    await self._invoke(callback, params.get("value"))
            for listener in list(self._listeners.get(method, ())) + list(self._listeners.get("*", ())):
                await self._invoke(listener, method, params)
            return
        rid = message.get("id")
        future = self._pending.pop(rid, None) if isinstance(rid, (int, str)) else None
        if future is None or future.done():
            return
        if "error" in message:
            future.set_exception(error_from_json(message["error"]))
        else:
            future.set_result(message.get("result"))

    async def _invoke(self, callback: Callable[..., Any], *args: Any) -> None:
        try:
            outcome = callback(*args)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as failure:
            logger.error("a depot callback raised", exc_info=failure)
            error = CallbackError(f"callback {getattr(callback, '__name__', callback)!s}", failure)
            self.callback_errors.append(error)
            self._unraised_callback_errors.append(error)

    async def _heartbeat_loop(self, period: float) -> None:
        loop = asyncio.get_running_loop()
        beats = itertools.count(1)
        try:
            while not self._closed:
                await asyncio.sleep(max(0.0, self._last_sent + period - loop.time()))
                if loop.time() - self._last_sent >= period:
                    await self._send({"jsonrpc": "2.0", "id": f"heartbeat-{next(beats)}", "method": "ping"})
        except (asyncio.CancelledError, zmq.ZMQError):
            pass

    async def _shutdown(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except BaseException:
                pass
        self._socket.close(0)


# Re-exported for `except depot.aio.CancelledError`.
_ = (CancelledError, DepotError)
