"""The synchronous Depot client: one DEALER socket, one I/O thread, one dispatch thread.

pyzmq sockets are not thread-safe, so exactly one thread (the I/O thread) owns
the DEALER socket: it sends what other threads put in its outbox (woken through
a pipe), receives, and sends the heartbeat ``ping``. Everything it receives goes,
in arrival order, to a dispatch thread that resolves pending calls and runs
notification callbacks. Because the daemon sends a transaction's notifications
before the response to the request that committed it, callbacks for those
notifications have run by the time :meth:`Client.call` returns.

Callbacks run on the dispatch thread. They may call the client again (for
example a :class:`~depot.results.FetchedResults` resyncing): a call made on the
dispatch thread keeps dispatching while it waits for its answer.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import random
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import zmq
from zmq.utils.monitor import recv_monitor_message

from .errors import (CallbackError, ConnectionClosedError, DepotError, DepotTimeoutError, MessageTooLargeError,
                     error_from_json)
from .keys import apply_curve
from .results import FetchedResults

__all__ = ["Client", "PendingCall", "Recorder", "members", "PROTOCOL_VERSION", "__version__"]

__version__ = "0.1.0"

#: The protocol version this client speaks.
PROTOCOL_VERSION = "1"

#: Called with ``("send" | "receive", message)`` for every JSON-RPC message, in wire order.
Recorder = Callable[[str, Any], None]

NotificationCallback = Callable[[str, Any], None]
ProgressCallback = Callable[[Dict[str, Any]], None]
ResponseCallback = Callable[[Optional[Any], Optional[DepotError]], None]
#: Called with each chunk of a streamed fetch's objects (or ids) as it arrives.
ObjectsCallback = Callable[[List[Any]], None]

logger = logging.getLogger("depot")

_STOP = object()


def members(add: Sequence[str] = (), remove: Sequence[str] = ()) -> Dict[str, List[str]]:
    """A change to a to-many relationship for :meth:`Client.save`: ids (or tempIds) to add and remove.

    A to-many value is a list of ids: fetch it by naming the relationship in ``properties``, and
    save a list to replace the whole set. ``members(...)`` is the other form a save takes,
    ``{"add": [...], "remove": [...]}``, applied to the set as of the commit, so concurrent
    writers adding members lose nothing::

        client.save(updated=[{"id": post, "values": {"tags": depot.members(add=[swift], remove=[old])}}])
    """
    change: Dict[str, List[str]] = {}
    if add:
        change["add"] = list(add)
    if remove:
        change["remove"] = list(remove)
    if not change:
        raise ValueError("members() needs ids to add or to remove")
    return change


def grouped_request(request: Mapping[str, Any], group_by: Optional[Sequence[str]] = None,
                    aggregates: Optional[Sequence[Mapping[str, Any]]] = None,
                    having: Optional[str] = None, prefetch: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """``request`` with the grouped-fetch members (DESIGN.md §5) set from the keyword arguments
    of :meth:`Client.fetch`: ``groupBy``, ``aggregates`` (``{"name", "function", "key"}``) and
    ``having``, and ``prefetch`` (relationship key paths). Those not given are left as the request
    has them."""
    params = dict(request)
    if prefetch is not None:
        if isinstance(prefetch, str):
            raise TypeError("prefetch is a list of key paths, e.g. ['homeTeam', 'homeTeam.coach']")
        params["prefetch"] = list(prefetch)
    if group_by is not None:
        if isinstance(group_by, str):
            raise TypeError("group_by is a list of key paths, e.g. ['qualifyingZone']")
        params["groupBy"] = list(group_by)
    if aggregates is not None:
        params["aggregates"] = [dict(aggregate) for aggregate in aggregates]
    if having is not None:
        params["having"] = having
    return params


def streamed_key(request: Mapping[str, Any]) -> Optional[str]:
    """Where a fetch's streamed chunks go in its answer (``"objects"`` or ``"ids"``); ``None`` when
    the client does not stream it (a count, or a request with a ``partialResultToken`` of its own)."""
    if request.get("partialResultToken") is not None:
        return None
    result_type = request.get("resultType") or "objects"
    if result_type == "count":
        return None
    return "ids" if result_type == "ids" else "objects"


class PendingCall:
    """A request on its way: wait for its result, or cancel it.

    Returned by :meth:`Client.request`; :meth:`Client.call` is ``request(...).result()``.
    """

    def __init__(self, client: "Client", request_id: Union[int, str], method: str) -> None:
        self.client = client
        #: The JSON-RPC id of the request.
        self.id = request_id
        #: The method called.
        self.method = method
        self._future: "Future[Any]" = Future()

    def done(self) -> bool:
        """Whether the answer has come."""
        return self._future.done()

    def cancel(self) -> None:
        """Sends ``$/cancelRequest``; the call then ends with :class:`~depot.errors.CancelledError`."""
        self.client.notify("$/cancelRequest", {"id": self.id})

    def result(self, timeout: Optional[float] = None) -> Any:
        """Waits for the result and returns it, or raises the daemon's error as a typed exception.

        Args:
            timeout: seconds to wait; the client's default when ``None``.

        Raises:
            DepotError: a subclass chosen by the error code.
            DepotTimeoutError: no answer in time.
            ConnectionClosedError: the client was closed first.
        """
        limit = self.client.timeout if timeout is None else timeout
        if self.client._on_dispatch_thread():
            self.client._pump_until(self._future, limit, self.method)
        else:
            done = threading.Event()
            self._future.add_done_callback(lambda _: done.set())
            if not done.wait(limit):
                raise DepotTimeoutError(
                    f"no answer to {self.method} from {self.client.endpoint} within {limit:g}s: "
                    "is depotd running at that endpoint?")
        self.client._raise_callback_error()
        return self._future.result(0)


def check_size(data: bytes, message: Any, capabilities: Mapping[str, Any]) -> None:
    """Raises :class:`MessageTooLargeError` when ``data`` is over the daemon's ``maxMessageSize``."""
    limit = capabilities.get("maxMessageSize") if isinstance(capabilities, Mapping) else None
    if isinstance(limit, int) and limit > 0 and len(data) > limit:
        method = message.get("method", "the message") if isinstance(message, dict) else "the message"
        raise MessageTooLargeError(
            f"{method} not sent: the message is {len(data)} bytes, over the daemon's maxMessageSize of {limit} "
            "(split it, e.g. smaller batches)")


class Client:
    """A session with ``depotd`` over ZeroMQ.

    Example::

        with Client("tcp://127.0.0.1:7000") as client:
            client.call("store/save", {"inserted": [{"entity": "Team", "values": {"teamName": "Brazil"}}]})
            teams = client.fetch({"entity": "Team", "sort": [{"key": "teamName"}]})

    Args:
        endpoint: ``ipc://PATH`` or ``tcp://127.0.0.1:PORT``.
        client_name: sent as ``clientInfo.name`` in ``initialize``.
        timeout: default seconds to wait for each answer.
        heartbeat: whether to ping every ``heartbeatInterval / 2`` seconds.
        recorder: called with every message sent and received (for tests and tracing).
        context: the ZeroMQ context; the process-wide one by default.
        server_key: for a daemon whose TCP endpoints require CURVE keys: its public key
            (Z85, 40 characters) or the path of its ``.pub`` file.
        key_file: this client's secret key file (``NAME.key`` from ``depot keys generate``).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        client_name: str = "depot-python",
        timeout: float = 30.0,
        heartbeat: bool = True,
        recorder: Optional[Recorder] = None,
        context: Optional["zmq.Context[Any]"] = None,
        server_key: Optional[str] = None,
        key_file: Optional[str] = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._recorder = recorder
        #: Whether an exception raised by one of your callbacks on the dispatch thread is raised
        #: again, as :class:`~depot.errors.CallbackError`, from the next call or ``result()``.
        self.raise_callback_errors = True
        #: Every exception your callbacks raised, oldest first.
        self.callback_errors: List[CallbackError] = []
        self._unraised_callback_errors: List[CallbackError] = []
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # libzmq adds a random jitter of up to one interval to each reconnect and doubles the
        # interval up to the maximum: clients dropped together do not come back in lockstep.
        self._socket.setsockopt(zmq.RECONNECT_IVL, 100)
        self._socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        try:
            apply_curve(self._socket, server_key, key_file)
        except ValueError:
            self._socket.close(0)
            raise
        try:
            self._socket.connect(endpoint)
        except zmq.ZMQError as error:
            self._socket.close(0)
            raise ConnectionClosedError(f"cannot connect to {endpoint!r}: {error}") from error
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: Dict[Union[int, str], "tuple[PendingCall, Optional[ResponseCallback]]"] = {}
        self._listeners: Dict[str, List[NotificationCallback]] = {}
        self._progress: Dict[Any, ProgressCallback] = {}
        self._outbox: "queue.SimpleQueue[bytes]" = queue.SimpleQueue()
        self._events: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._closed = threading.Event()
        self._client_name = client_name
        #: Live FetchedResults, subscribed again when the session is lost (a daemon restart).
        self._live_results: "weakref.WeakSet[FetchedResults]" = weakref.WeakSet()
        self._recovering = threading.Lock()
        #: How many times the session was opened again after the daemon lost it.
        self.reconnect_count = 0
        self._heartbeat_enabled = heartbeat
        self._heartbeat_interval: Optional[float] = None
        self._io_thread = threading.Thread(target=self._io_loop, name="depot-io", daemon=True)
        self._dispatch_thread = threading.Thread(target=self._dispatch_loop, name="depot-dispatch", daemon=True)
        self._io_thread.start()
        self._dispatch_thread.start()
        try:
            self._initialize()
        except BaseException:
            self._shutdown()
            raise

    def _initialize(self) -> None:
        """Opens the session (``initialize``) and keeps what the daemon says of it."""
        info = self.call("initialize", {
            "clientInfo": {"name": self._client_name, "version": __version__},
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
        })
        #: ``initialize``'s result: serverInfo, protocolVersion, sessionId, heartbeatInterval, capabilities.
        self.server_info: Dict[str, Any] = info
        self.session_id: str = info.get("sessionId", "")
        self.capabilities: Dict[str, Any] = info.get("capabilities", {})
        self._heartbeat_interval = float(info.get("heartbeatInterval") or 0) or None
        self._wake()

    def _session_lost(self) -> None:
        """The daemon answered -32002: it no longer knows this session (it restarted).
        Opens a new one in the background, with jittered backoff, then resubscribes."""
        if self._closed.is_set() or not self._recovering.acquire(blocking=False):
            return
        threading.Thread(target=self._recover, name="depot-recover", daemon=True).start()

    def _recover(self) -> None:
        try:
            delay = 0.1
            while not self._closed.is_set():
                try:
                    self._initialize()
                    break
                except ConnectionClosedError:
                    # Closed while its session was being reopened: nothing is left to recover.
                    return
                except DepotTimeoutError as error:
                    logger.info("depot: reopening the session timed out (%s); retrying", error)
                except DepotError as error:
                    # Still initialized (an earlier attempt got through): that session will do.
                    if error.code == -32600:
                        break
                    logger.info("depot: reopening the session failed (%s); retrying", error)
                # Spread over +-50 %: clients dropped together come back spread out.
                self._closed.wait(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 5.0)
            if self._closed.is_set():
                return
            self.reconnect_count += 1
            self._resubscribe_all()
        finally:
            self._recovering.release()

    def _resubscribe_all(self) -> None:
        """Subscribes every live FetchedResults again on the new session, resumed from the
        results it holds (DESIGN.md §7, Resuming: only what changed since is sent)."""
        for results in list(self._live_results):
            try:
                results._resubscribe()
            except DepotError as error:
                logger.error("depot: resubscribing %s failed: %s", results.request, error)

    def _track(self, results: FetchedResults) -> None:
        """Remembers a live FetchedResults, to resubscribe it after a lost session."""
        self._live_results.add(results)

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the client failed)."""
        return self._closed.is_set()

    def close(self) -> None:
        """Sends ``disconnect`` (briefly waiting for its answer) and stops the threads."""
        if self._closed.is_set():
            return
        try:
            self.call("disconnect", None, timeout=2.0)
        except Exception:  # The daemon may be gone already; closing must still work.
            pass
        self._shutdown()

    # -- calls -----------------------------------------------------------------------------

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             timeout: Optional[float] = None) -> Any:
        """Calls ``method`` and returns its result.

        Raises:
            DepotError: the daemon's error, as the subclass for its code.
            DepotTimeoutError: no answer within ``timeout`` (default: the client's).
        """
        return self.request(method, params).result(timeout)

    def request(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
                request_id: Union[int, str, None] = None,
                on_response: Optional[ResponseCallback] = None) -> PendingCall:
        """Sends a request without waiting; returns a :class:`PendingCall`.

        Args:
            on_response: called on the dispatch thread with ``(result, error)`` as soon as the
                answer arrives, before any later message is dispatched.
        """
        if self._closed.is_set():
            raise ConnectionClosedError(f"the client of {self.endpoint} is closed")
        rid = next(self._ids) if request_id is None else request_id
        pending = PendingCall(self, rid, method)
        with self._lock:
            self._pending[rid] = (pending, on_response)
        message: Dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        try:
            self._send(message)
        except MessageTooLargeError:
            with self._lock:
                self._pending.pop(rid, None)
            raise
        return pending

    def notify(self, method: str, params: Optional[Mapping[str, Any]] = None) -> None:
        """Sends a notification (no answer), e.g. ``$/cancelRequest``."""
        message: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def ping(self) -> None:
        """Calls ``ping``."""
        self.call("ping")

    # -- notifications ----------------------------------------------------------------------

    def on_notification(self, method: str, callback: NotificationCallback) -> Callable[[], None]:
        """Calls ``callback(method, params)`` for every notification named ``method`` (``"*"`` for all).

        Returns a function that removes the callback.
        """
        with self._lock:
            self._listeners.setdefault(method, []).append(callback)

        def remove() -> None:
            with self._lock:
                callbacks = self._listeners.get(method, [])
                if callback in callbacks:
                    callbacks.remove(callback)
        return remove

    def new_token(self, prefix: str = "py") -> str:
        """A fresh token for ``workDoneToken`` / ``partialResultToken``."""
        return f"{prefix}-{self.session_id}-{next(self._tokens)}"

    def on_progress(self, token: Any, callback: ProgressCallback) -> Callable[[], None]:
        """Calls ``callback(value)`` for every ``$/progress`` carrying ``token``; returns a remover."""
        key = json.dumps(token, sort_keys=True)
        with self._lock:
            self._progress[key] = callback

        def remove() -> None:
            with self._lock:
                self._progress.pop(key, None)
        return remove

    # -- conveniences --------------------------------------------------------------------

    def fetch(self, request: Mapping[str, Any], *, progress: Optional[ProgressCallback] = None,
              on_objects: Optional[ObjectsCallback] = None, timeout: Optional[float] = None,
              group_by: Optional[Sequence[str]] = None, aggregates: Optional[Sequence[Mapping[str, Any]]] = None,
              having: Optional[str] = None, prefetch: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """``store/fetch`` of any size, streamed (see :meth:`fetch_async`); waits for the whole result.

        ``prefetch`` names relationship key paths (``["homeTeam", "homeTeam.coach", "players"]``):
        the answer's ``related`` holds every object they reach from the rows, by id (DESIGN.md §5).

        ``progress`` gets each work-done ``$/progress`` value (begin, reports, end), ``on_objects``
        each chunk of objects as it arrives.

        ``group_by``, ``aggregates`` and ``having`` make it a grouped fetch (Core Data's
        ``propertiesToGroupBy``, expression descriptions and ``havingPredicate``): ``objects`` is
        then one dictionary per group::

            client.fetch({"entity": "Team", "sort": [{"key": "wins", "ascending": False}]},
                         group_by=["qualifyingZone"],
                         aggregates=[{"name": "teams", "function": "count"},
                                     {"name": "wins", "function": "sum", "key": "wins"}],
                         having="teams > 1")["objects"]
            # [{"qualifyingZone": "Europe", "teams": 13, "wins": 90}, ...]
        """
        pending = self.fetch_async(request, progress=progress, on_objects=on_objects, group_by=group_by,
                                   aggregates=aggregates, having=having, prefetch=prefetch)
        result: Dict[str, Any] = pending.result(timeout)
        return result

    def fetch_async(self, request: Mapping[str, Any], *, progress: Optional[ProgressCallback] = None,
                    on_objects: Optional[ObjectsCallback] = None, group_by: Optional[Sequence[str]] = None,
                    aggregates: Optional[Sequence[Mapping[str, Any]]] = None,
                    having: Optional[str] = None, prefetch: Optional[Sequence[str]] = None) -> PendingCall:
        """Starts a ``store/fetch`` and returns at once; ``.cancel()`` sends ``$/cancelRequest``.

        Like ``NSAsynchronousFetchRequest``: ``progress`` follows the work, and a cancelled fetch
        raises :class:`~depot.errors.CancelledError` from ``.result()``. With ``progress``, the
        request asks for ``countFirst`` (unless it says otherwise), so ``begin`` carries the total.

        The objects (or ids) stream in ``$/progress`` chunks of ``batchSize`` under a
        ``partialResultToken`` of the client's own, so a fetch of any size works: the daemon's cap
        on one answer (``--max-fetch-objects``, 100,000 by default) does not apply. ``on_objects``
        gets each chunk (a list) as it arrives, on the dispatch thread; ``.result()`` is the usual
        answer, ``{"objects": [...], "count": n, "transaction": t}`` (``"ids"`` for ``resultType:
        "ids"``), with every chunk in order. A request that names its own ``partialResultToken``, or
        asks for a count, is sent as it is. ``group_by``, ``aggregates`` and ``having`` are those of
        :meth:`fetch`: the groups' dictionaries stream as objects do.
        """
        params = grouped_request(request, group_by, aggregates, having, prefetch)
        removers: List[Callable[[], None]] = []
        if progress is not None:
            params.setdefault("countFirst", True)
            token = params.setdefault("workDoneToken", self.new_token("fetch"))
            removers.append(self.on_progress(token, progress))
        key = streamed_key(params)
        gathered: List[Any] = []
        if key is not None:
            params["partialResultToken"] = self.new_token("objects")

            def chunk(value: Dict[str, Any]) -> None:
                items = value.get("objects") or []
                gathered.extend(items)
                if on_objects is not None and items:
                    on_objects(items)
            removers.append(self.on_progress(params["partialResultToken"], chunk))

        def finished(result: Any, error: Optional[DepotError]) -> None:
            # Every chunk was dispatched before the answer (wire order).
            for remove in removers:
                remove()
            if key is not None and error is None and isinstance(result, dict):
                result.pop("objects", None)
                result[key] = gathered
        return self.request("store/fetch", params, on_response=finished)

    def save(self, inserted: Sequence[Mapping[str, Any]] = (), updated: Sequence[Mapping[str, Any]] = (),
             deleted: Sequence[Mapping[str, Any]] = (), *, save_id: Optional[str] = None,
             **options: Any) -> Dict[str, Any]:
        """``store/save``: one atomic transaction; ``options`` may carry mergePolicy and author.

        ``save_id`` (1 to 128 characters, chosen by the caller, e.g. ``str(uuid.uuid4())``) names
        the save: resending a save whose ``save_id`` already committed (say, after a timeout that
        left its outcome unknown) returns the first answer and does not apply it again.
        """
        params: Dict[str, Any] = {"inserted": list(inserted), "updated": list(updated), "deleted": list(deleted),
                                  **options}
        if save_id is not None:
            params["saveId"] = save_id
        result: Dict[str, Any] = self.call("store/save", params)
        return result

    def subscribe(self, request: Mapping[str, Any], *, section_key_path: Optional[str] = None,
                  cache_name: Optional[str] = None, include: str = "firstBatch",
                  group_by: Optional[Sequence[str]] = None, aggregates: Optional[Sequence[Mapping[str, Any]]] = None,
                  having: Optional[str] = None, prefetch: Optional[Sequence[str]] = None,
                  **options: Any) -> FetchedResults:
        """``results/subscribe``: a live :class:`~depot.results.FetchedResults` mirror of the request.

        ``include`` defaults to ``"firstBatch"`` as in the Swift client and the daemon: the rest of
        the objects are loaded with ``results/objects`` before this returns. ``group_by``,
        ``aggregates`` and ``having`` (as in :meth:`fetch`) make it a live grouped result
        (DESIGN.md §7): its rows are the groups' dictionaries, with ids ``group:[<groupBy values>]``::

            wins = client.subscribe({"entity": "Team", "sort": [{"key": "wins", "ascending": False}]},
                                    group_by=["qualifyingZone"],
                                    aggregates=[{"name": "wins", "function": "sum", "key": "wins"}])
            print(wins.fetched_objects)  # [{"qualifyingZone": "Europe", "wins": 12}, ...], kept live

        ``prefetch`` keeps the objects the rows reach live beside them (DESIGN.md §7): a renamed
        team updates every match row showing it, and ``results.follow(match, "homeTeam")`` reads it
        without a round trip.
        """
        return FetchedResults(self, grouped_request(request, group_by, aggregates, having, prefetch),
                              section_key_path=section_key_path, cache_name=cache_name, include=include, **options)

    # -- internals -------------------------------------------------------------------------

    def _send(self, message: Any) -> None:
        data = json.dumps(message, separators=(",", ":")).encode()
        check_size(data, message, getattr(self, "capabilities", {}))
        self._outbox.put(data)
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"x")
        except OSError:
            pass

    def _on_dispatch_thread(self) -> bool:
        return threading.current_thread() is self._dispatch_thread

    def _record(self, direction: str, data: bytes) -> None:
        if self._recorder is None:
            return
        try:
            self._recorder(direction, json.loads(data))
        except Exception:  # A recorder must never break the client.
            logger.exception("recorder failed")

    def _io_loop(self) -> None:
        """The socket's one owner: sends the outbox, receives, pings."""
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._wake_read, zmq.POLLIN)
        # A connection that drops and comes back is a daemon restart: the new daemon
        # knows nothing of this session (its `ping`s still answer, sessions or not).
        monitor = self._socket.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        poller.register(monitor, zmq.POLLIN)
        dropped = False
        last_sent = time.monotonic()
        heartbeats = itertools.count(1)
        try:
            while not self._closed.is_set():
                interval = self._heartbeat_interval if self._heartbeat_enabled else None
                wait_ms = None if interval is None else max(0, (last_sent + interval / 2 - time.monotonic()) * 1000)
                events = dict(poller.poll(wait_ms if wait_ms is None else int(wait_ms) + 1))
                if self._wake_read in events:
                    os.read(self._wake_read, 4096)
                while True:
                    try:
                        data = self._outbox.get_nowait()
                    except queue.Empty:
                        break
                    if data is _STOP:
                        return
                    self._record("send", data)
                    self._socket.send(data)
                    last_sent = time.monotonic()
                if monitor in events:
                    while True:
                        try:
                            event = recv_monitor_message(monitor, zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        if event["event"] == zmq.EVENT_DISCONNECTED:
                            dropped = True
                        elif event["event"] == zmq.EVENT_CONNECTED and dropped:
                            dropped = False
                            self._session_lost()
                if self._socket in events:
                    while True:
                        try:
                            data = self._socket.recv(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._record("receive", data)
                        self._events.put(data)
                if interval is not None and time.monotonic() - last_sent >= interval / 2:
                    ping = json.dumps({"jsonrpc": "2.0", "id": f"heartbeat-{next(heartbeats)}", "method": "ping"})
                    self._record("send", ping.encode())
                    self._socket.send(ping.encode())
                    last_sent = time.monotonic()
        except zmq.ZMQError as error:
            logger.error("depot client socket failed: %s", error)
        finally:
            self._socket.disable_monitor()
            monitor.close(0)
            self._socket.close(0)
            self._events.put(_STOP)

    def _dispatch_loop(self) -> None:
        while True:
            item = self._events.get()
            if item is _STOP:
                self._fail_pending()
                return
            self._dispatch(item)

    def _pump_until(self, future: "Future[Any]", timeout: float, method: str) -> None:
        """Dispatches on the dispatch thread until ``future`` is done (calls made from callbacks)."""
        deadline = time.monotonic() + timeout
        while not future.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DepotTimeoutError(f"no answer to {method} from {self.endpoint} within {timeout:g}s")
            try:
                item = self._events.get(timeout=remaining)
            except queue.Empty:
                continue
            if item is _STOP:
                self._events.put(_STOP)
                self._fail_pending()
                break
            self._dispatch(item)

    def _dispatch(self, data: bytes) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            logger.error("depot client received invalid JSON: %r", data[:200])
            return
        for element in message if isinstance(message, list) else [message]:
            if not isinstance(element, dict):
                continue
            if "method" in element:
                self._dispatch_notification(element["method"], element.get("params"))
            elif "id" in element:
                self._dispatch_response(element)

    def _dispatch_response(self, message: Dict[str, Any]) -> None:
        with self._lock:
            entry = self._pending.pop(message["id"], None) if message.get("id") is not None else None
        if entry is None:
            if "error" in message and message.get("id") is None:
                logger.error("depot error without id: %s", message["error"])
            elif str(message.get("id", "")).startswith("heartbeat-") and \
                    (message.get("error") or {}).get("code") == -32002:
                self._session_lost()
            return
        pending, on_response = entry
        error = error_from_json(message["error"]) if "error" in message else None
        if error is not None and error.code == -32002 and pending.method != "initialize":
            self._session_lost()
        result = message.get("result")
        if on_response is not None:
            try:
                on_response(result, error)
            except Exception as failure:
                self._callback_failed(f"response callback for {pending.method}", failure)
        if error is not None:
            pending._future.set_exception(error)
        else:
            pending._future.set_result(result)

    def _dispatch_notification(self, method: str, params: Any) -> None:
        with self._lock:
            callbacks = list(self._listeners.get(method, ())) + list(self._listeners.get("*", ()))
            progress = None
            if method == "$/progress" and isinstance(params, dict):
                progress = self._progress.get(json.dumps(params.get("token"), sort_keys=True))
        if progress is not None:
            try:
                progress(params.get("value"))
            except Exception as failure:
                self._callback_failed("progress callback", failure)
        for callback in callbacks:
            try:
                callback(method, params)
            except Exception as failure:
                self._callback_failed(f"notification callback for {method}", failure)

    def _callback_failed(self, where: str, failure: Exception) -> None:
        """Logs a callback's exception and keeps it to raise from the next call."""
        logger.error("the %s raised", where, exc_info=failure)
        error = failure if isinstance(failure, CallbackError) else CallbackError(where, failure)
        with self._lock:
            self.callback_errors.append(error)
            if self.raise_callback_errors:
                self._unraised_callback_errors.append(error)

    def _raise_callback_error(self) -> None:
        """Raises the oldest callback exception not raised yet."""
        with self._lock:
            if not self._unraised_callback_errors:
                return
            error = self._unraised_callback_errors.pop(0)
        raise error

    def _fail_pending(self) -> None:
        with self._lock:
            entries = list(self._pending.values())
            self._pending.clear()
        for pending, _ in entries:
            if not pending._future.done():
                pending._future.set_exception(ConnectionClosedError(f"the client of {self.endpoint} closed"))

    def _shutdown(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._outbox.put(_STOP)  # type: ignore[arg-type]
        self._wake()
        if threading.current_thread() is not self._io_thread:
            self._io_thread.join(5)
        if not self._on_dispatch_thread():
            self._dispatch_thread.join(5)
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass
