"""CURVE keys for a daemon whose TCP endpoints require them (DESIGN.md §2).

``depot keys generate NAME`` writes ``NAME.key`` (the secret key, mode 0600) and
``NAME.pub``; the daemon lists client public keys with a role in its
authorized-keys file. A client passes the daemon's public key and its own
secret key file::

    Client("tcp://db.example:7000", server_key="server.pub", key_file="alice.key")
"""

from __future__ import annotations

import os
from typing import Any, Optional

import zmq

__all__ = ["read_key", "is_z85_key", "apply_curve"]

_Z85 = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def is_z85_key(text: str) -> bool:
    """Whether ``text`` is a Z85-encoded 32-byte key: 40 characters of the Z85 alphabet."""
    return len(text) == 40 and all(character in _Z85 for character in text)


def read_key(key_or_path: str, what: str = "key") -> str:
    """A Z85 key given as itself or as a file holding it (its first line that is a key).

    Z85 has ``#``, so comment lines are told apart by their spaces, not by ``#``.
    """
    if is_z85_key(key_or_path) and not os.path.exists(key_or_path):
        return key_or_path
    try:
        with open(key_or_path, encoding="utf-8") as handle:
            lines = [line.strip() for line in handle]
    except OSError as error:
        raise ValueError(f"cannot read the {what} file {key_or_path}: {error.strerror}") from error
    for line in lines:
        if is_z85_key(line):
            return line
    raise ValueError(f"the {what} file {key_or_path} does not hold a Z85 key (40 characters)")


def apply_curve(socket: "zmq.Socket[Any]", server_key: Optional[str], key_file: Optional[str]) -> None:
    """Makes ``socket`` a CURVE client when both keys are given (before it connects)."""
    if server_key is None and key_file is None:
        return
    if server_key is None or key_file is None:
        raise ValueError("server_key and key_file go together")
    server = read_key(server_key, "server key")
    secret = read_key(key_file, "client key")
    socket.curve_serverkey = server.encode("ascii")
    socket.curve_secretkey = secret.encode("ascii")
    socket.curve_publickey = zmq.curve_public(secret.encode("ascii"))
