"""CURVE keys from Python and the CLI against a real depotd (DESIGN.md §2).

Keys come from ``depot keys generate``; the daemon binds 0.0.0.0 (served only
because keys are configured) and every client connects over 127.0.0.1.
"""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
from typing import Dict, Iterator

import pytest

import depot
from conftest import DEPOT, Daemon


def generate(directory: pathlib.Path, name: str) -> Dict[str, pathlib.Path]:
    if not os.path.exists(DEPOT):
        pytest.skip(f"depot not built at {DEPOT}")
    done = subprocess.run([DEPOT, "keys", "generate", str(directory / name)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return {"key": directory / f"{name}.key", "pub": directory / f"{name}.pub"}


def public_key(path: pathlib.Path) -> str:
    return depot.keys.read_key(str(path))


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, object]]:
    directory = tmp_path_factory.mktemp("keys")
    keys = {name: generate(directory, name) for name in ("server", "reader", "writer", "stranger")}
    authorized = directory / "authorized_keys"
    authorized.write_text(
        "# clients\n"
        f"{public_key(keys['reader']['pub'])} read reader\n"
        f"{public_key(keys['writer']['pub'])} write writer\n")
    running = Daemon("--curve-secret-key", str(keys["server"]["key"]), "--authorized-keys", str(authorized),
                     "--listen", "tcp://0.0.0.0:*")
    endpoint = running.endpoint.replace("0.0.0.0", "127.0.0.1")
    try:
        yield {"daemon": running, "endpoint": endpoint, "keys": keys}
    finally:
        running.stop()


def test_generate_writes_a_private_secret_and_a_public_key(keyed: Dict[str, object]) -> None:
    keys = keyed["keys"]["reader"]  # type: ignore[index]
    assert stat.S_IMODE(os.stat(keys["key"]).st_mode) == 0o600
    assert depot.keys.is_z85_key(public_key(keys["pub"]))
    again = subprocess.run([DEPOT, "keys", "generate", str(keys["key"]).removesuffix(".key")],
                           capture_output=True, text=True, timeout=30)
    assert again.returncode == 1 and "exists" in again.stderr


def test_python_client_with_keys_and_roles(keyed: Dict[str, object]) -> None:
    keys = keyed["keys"]  # type: ignore[assignment]
    endpoint = str(keyed["endpoint"])
    with depot.Client(endpoint, server_key=str(keys["server"]["pub"]), key_file=str(keys["writer"]["key"]),
                      timeout=10) as writer:
        assert writer.call("ping") == {}
        with pytest.raises(depot.ForbiddenError) as refused:
            writer.call("model/define", {"entities": []})
        assert "model/define" in refused.value.message and "'write'" in refused.value.message
    with depot.Client(endpoint, server_key=public_key(keys["server"]["pub"]), key_file=str(keys["reader"]["key"]),
                      timeout=10) as reader:
        assert reader.call("model/get")["version"] == 0
        with pytest.raises(depot.ForbiddenError):
            reader.call("store/save", {})


def test_python_client_without_a_listed_key_gets_no_session(keyed: Dict[str, object]) -> None:
    keys = keyed["keys"]  # type: ignore[assignment]
    with pytest.raises(depot.DepotTimeoutError):
        depot.Client(str(keyed["endpoint"]), server_key=str(keys["server"]["pub"]),
                     key_file=str(keys["stranger"]["key"]), timeout=1.5)
    with pytest.raises(depot.DepotTimeoutError):
        depot.Client(str(keyed["endpoint"]), timeout=1.5)
    with pytest.raises(ValueError):
        depot.Client(str(keyed["endpoint"]), server_key=str(keys["server"]["pub"]), timeout=1.5)


def test_cli_with_keys(keyed: Dict[str, object]) -> None:
    keys = keyed["keys"]  # type: ignore[assignment]
    base = [DEPOT, "ping", "--connect", str(keyed["endpoint"]), "--timeout", "5"]
    done = subprocess.run(base + ["--server-key", str(keys["server"]["pub"]), "--key", str(keys["reader"]["key"])],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "pong" in done.stdout
    refused = subprocess.run(
        base + ["--server-key", str(keys["server"]["pub"]), "--key", str(keys["stranger"]["key"])],
        capture_output=True, text=True, timeout=30)
    assert refused.returncode == 1
    assert "refused the CURVE handshake" in refused.stderr
    lonely = subprocess.run(base + ["--key", str(keys["reader"]["key"])], capture_output=True, text=True, timeout=30)
    assert lonely.returncode == 1 and "go together" in lonely.stderr
