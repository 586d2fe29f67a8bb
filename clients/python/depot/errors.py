"""Exceptions raised by the Depot client.

Every JSON-RPC error the daemon answers with becomes a :class:`DepotError`
subclass chosen by its code (DESIGN.md §10), so callers can write::

    try:
        client.call("store/save", {...})
    except UniqueConstraintError as error:
        print(error.data)

Failures of the client itself (no answer in time, a closed connection) are
:class:`DepotClientError` subclasses and carry no code.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type

__all__ = [
    "DepotException",
    "DepotClientError",
    "DepotTimeoutError",
    "ConnectionClosedError",
    "CallbackError",
    "MessageTooLargeError",
    "DepotError",
    "ParseError",
    "InvalidRequestError",
    "MethodNotFoundError",
    "InvalidParamsError",
    "InternalError",
    "NotInitializedError",
    "CancelledError",
    "ServerCancelledError",
    "ValidationError",
    "UniqueConstraintError",
    "MergeConflictError",
    "NotFoundError",
    "PredicateSyntaxError",
    "DeleteDeniedError",
    "MigrationRefusedError",
    "OverloadedError",
    "ForbiddenError",
    "error_from_json",
]


class DepotException(Exception):
    """The root of every exception this package raises."""


class DepotClientError(DepotException):
    """The client could not complete a call (no server error involved)."""


class DepotTimeoutError(DepotClientError, TimeoutError):
    """No answer came within the timeout: is depotd running at that endpoint?"""


class ConnectionClosedError(DepotClientError):
    """The connection was closed before the answer came."""


class CallbackError(DepotClientError):
    """A callback of yours (notification, progress, response, fetched-results delegate or
    ``on_change``) raised on the client's dispatch thread.

    The client keeps running; the next call or ``result()`` on the client raises this, with the
    callback's exception as ``__cause__`` (also in :attr:`depot.Client.callback_errors`).
    """

    def __init__(self, where: str, error: BaseException) -> None:
        super().__init__(f"the {where} callback raised {type(error).__name__}: {error}")
        #: Which callback: ``"notification callback for results/didChange"``, ``"progress"``, ...
        self.where = where
        #: The callback's exception.
        self.error = error
        self.__cause__ = error

class MessageTooLargeError(DepotClientError, ValueError):
    """The request is larger than the daemon's ``maxMessageSize``: it was not sent.

    libzmq drops the whole connection on such a message and no answer would ever come.
    """


class DepotError(DepotException):
    """A JSON-RPC error answered by the daemon.

    Attributes:
        code: the JSON-RPC error code, e.g. -32011.
        message: the daemon's sentence saying what was wrong and with which value.
        data: structured detail (``data.field``, ``data.errors``, ...), or ``None``.
    """

    #: The code this class stands for; ``None`` on the base class.
    CODE: Optional[int] = None

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> Dict[str, Any]:
        """The JSON-RPC error object."""
        body: Dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            body["data"] = self.data
        return body


class ParseError(DepotError):
    """-32700: the daemon could not parse the JSON it received."""

    CODE = -32700


class InvalidRequestError(DepotError):
    """-32600: the message is not a valid JSON-RPC request."""

    CODE = -32600


class MethodNotFoundError(DepotError):
    """-32601: the daemon does not serve that method."""

    CODE = -32601


class InvalidParamsError(DepotError):
    """-32602: bad params; ``data["field"]`` names the bad field."""

    CODE = -32602

    @property
    def field(self) -> Optional[str]:
        """The name of the bad field, when the daemon gave one."""
        return self.data.get("field") if isinstance(self.data, dict) else None


class InternalError(DepotError):
    """-32603: the daemon failed on its own account."""

    CODE = -32603


class NotInitializedError(DepotError):
    """-32002: a request came before ``initialize``."""

    CODE = -32002


class CancelledError(DepotError):
    """-32800: the request was cancelled by the client (``$/cancelRequest``)."""

    CODE = -32800


class ServerCancelledError(DepotError):
    """-32802: the daemon cancelled the request (it is shutting down)."""

    CODE = -32802


class ValidationError(DepotError):
    """-32010: a save failed validation; ``errors`` lists every problem."""

    CODE = -32010

    @property
    def errors(self) -> List[Dict[str, Any]]:
        """``[{object, key, code, message}]``: every problem found."""
        found = self.data.get("errors", []) if isinstance(self.data, dict) else []
        return list(found) if isinstance(found, list) else []


class UniqueConstraintError(DepotError):
    """-32011: a save violated a uniqueness constraint."""

    CODE = -32011


class MergeConflictError(DepotError):
    """-32012: a save conflicted with newer store values under the ``error`` policy."""

    CODE = -32012

    @property
    def conflicts(self) -> List[Dict[str, Any]]:
        """``[{id, keys, storeVersion, storeValues}]``: every conflicting object."""
        found = self.data.get("conflicts", []) if isinstance(self.data, dict) else []
        return list(found) if isinstance(found, list) else []


class NotFoundError(DepotError):
    """-32013: an object or other named thing does not exist."""

    CODE = -32013


class PredicateSyntaxError(DepotError):
    """-32014: a predicate could not be parsed; ``data`` has ``position`` and ``expected``."""

    CODE = -32014

    @property
    def position(self) -> Optional[int]:
        """Where in the predicate text parsing failed."""
        return self.data.get("position") if isinstance(self.data, dict) else None


class DeleteDeniedError(DepotError):
    """-32015: a ``deny`` delete rule refused a delete."""

    CODE = -32015


class MigrationRefusedError(DepotError):
    """-32016: a model redefinition needs more than a lightweight migration."""

    CODE = -32016


class OverloadedError(DepotError):
    """-32017: the daemon is overloaded; try again later."""

    CODE = -32017


class ForbiddenError(DepotError):
    """-32018: the client key's role does not allow the method, or the key was revoked."""

    CODE = -32018


_BY_CODE: Dict[int, Type[DepotError]] = {
    cls.CODE: cls
    for cls in (
        ParseError, InvalidRequestError, MethodNotFoundError, InvalidParamsError, InternalError,
        NotInitializedError, CancelledError, ServerCancelledError, ValidationError,
        UniqueConstraintError, MergeConflictError, NotFoundError, PredicateSyntaxError,
        DeleteDeniedError, MigrationRefusedError, OverloadedError, ForbiddenError,
    )
    if cls.CODE is not None
}


def error_from_json(error: Any) -> DepotError:
    """The exception for a JSON-RPC error object, typed by its code."""
    if not isinstance(error, dict):
        return InternalError(-32603, f"malformed error object from the daemon: {error!r}")
    code = error.get("code")
    message = error.get("message", "")
    cls = _BY_CODE.get(code, DepotError) if isinstance(code, int) else DepotError
    return cls(code if isinstance(code, int) else -32603, str(message), error.get("data"))
