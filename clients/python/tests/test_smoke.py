"""The daemon built by `make test` starts and answers a raw JSON-RPC ping over ZeroMQ."""

import json
import os
import subprocess
import tempfile

import zmq


def test_daemon_answers_ping_over_a_real_socket() -> None:
    depotd = os.environ.get("DEPOTD", ".build/debug/depotd")
    with tempfile.TemporaryDirectory() as data_dir:
        process = subprocess.Popen(
            [depotd, "--data-dir", data_dir, "--listen", "tcp://127.0.0.1:*"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            line = process.stdout.readline()
            assert line.startswith("depotd listening on "), line
            endpoint = line.split()[-1]
            socket = zmq.Context.instance().socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect(endpoint)
            socket.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode())
            assert socket.poll(5000), "no answer to ping"
            assert json.loads(socket.recv()) == {"jsonrpc": "2.0", "id": 1, "result": {}}
            socket.close()
        finally:
            process.terminate()
            assert process.wait(10) == 0
