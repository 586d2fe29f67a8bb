"""Python client for depotd: JSON-RPC 2.0 over ZeroMQ, typed errors, live fetched results.

Quick start::

    from depot import Client

    with Client("tcp://127.0.0.1:7000") as client:
        client.call("store/save", {"inserted": [{"entity": "Team", "values": {"teamName": "Brazil"}}]})
        print(client.fetch({"entity": "Team"})["objects"])

See :class:`depot.Client`, :class:`depot.AsyncClient`, :class:`depot.FetchedResults`
and the exceptions in :mod:`depot.errors`.
"""

from .aio import AsyncClient
from .client import PROTOCOL_VERSION, Client, PendingCall, __version__, members
from .errors import (
    DepotException,
    DepotClientError,
    DepotTimeoutError,
    ConnectionClosedError,
    CallbackError,
    MessageTooLargeError,
    DepotError,
    ParseError,
    InvalidRequestError,
    MethodNotFoundError,
    InvalidParamsError,
    InternalError,
    NotInitializedError,
    CancelledError,
    ServerCancelledError,
    ValidationError,
    UniqueConstraintError,
    MergeConflictError,
    NotFoundError,
    PredicateSyntaxError,
    DeleteDeniedError,
    MigrationRefusedError,
    OverloadedError,
    ForbiddenError,
    error_from_json,
)
from . import errors
from . import keys
from .results import (FetchedResults, FetchedResultsDelegate, InconsistentDelta, ResultsClient, ResultsState, Section,
                      format_table, results_digest)

__all__ = [
    "Client", "AsyncClient", "PendingCall", "members", "FetchedResults", "FetchedResultsDelegate", "ResultsState",
    "Section", "InconsistentDelta", "ResultsClient", "format_table", "results_digest", "PROTOCOL_VERSION", "__version__",
] + errors.__all__
