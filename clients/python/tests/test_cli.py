"""The depot CLI end to end: call errors, import (files, directories, loopback URLs, bad input, Ctrl-C),
model, watch."""

from __future__ import annotations

import functools
import http.server
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import threading
from typing import Any, Dict, Iterator, List

import pytest

import depot
from conftest import DEPOT, FIXTURES, Daemon

SPECS = FIXTURES / "specs"
MAP = "name=name,version=release,downloads_a_month=downloads,summary=summary"


def run_depot(*args: str, timeout: float = 120, **options: Any) -> subprocess.CompletedProcess:
    if not os.path.exists(DEPOT):
        pytest.skip(f"depot not built at {DEPOT}: run `swift build` or set DEPOT")
    return subprocess.run([DEPOT, *args], capture_output=True, text=True, timeout=timeout, **options)


def import_args(daemon: Daemon, source: str, *extra: str) -> List[str]:
    return ["import", source, "--entity", "Package", "--identity", "name,version", "--map", MAP,
            "--connect", daemon.endpoint, "--json", *extra]


def summary_of(process: subprocess.CompletedProcess) -> Dict[str, Any]:
    assert process.stdout.strip(), f"no summary; stderr: {process.stderr}"
    return json.loads(process.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture()
def clean_packages(daemon: Daemon) -> Iterator[depot.Client]:
    """A client, with no Package objects before and after the test."""
    with daemon.client() as client:
        def wipe() -> None:
            ids = client.fetch({"entity": "Package", "resultType": "ids"})["ids"]
            for start in range(0, len(ids), 1000):
                client.save(deleted=[{"id": i} for i in ids[start:start + 1000]])
        wipe()
        yield client
        wipe()


# -- call -------------------------------------------------------------------------------------


def test_call_prints_the_result_and_errors_go_to_stderr_with_status_1(daemon: Daemon) -> None:
    ok = run_depot("call", "store/count", '{"entity": "Team"}', "--connect", daemon.endpoint)
    assert ok.returncode == 0, ok.stderr
    assert "count" in json.loads(ok.stdout)
    failed = run_depot("call", "store/count", '{"entity": "Nope"}', "--connect", daemon.endpoint)
    assert failed.returncode == 1
    error = json.loads(failed.stderr)
    assert error["code"] == -32602 and "Nope" in error["message"]
    piped = run_depot("call", "store/count", "-", "--connect", daemon.endpoint, "--json", input='{"entity": "Team"}')
    assert piped.returncode == 0 and piped.stdout.startswith("{")


def test_call_refuses_bad_json_before_connecting(tmp_path: pathlib.Path) -> None:
    bad = run_depot("call", "store/fetch", '{"entity": ', "--data-dir", str(tmp_path))
    assert bad.returncode != 0
    assert "not valid JSON" in bad.stderr
    not_object = run_depot("call", "store/fetch", "[1, 2]", "--data-dir", str(tmp_path))
    assert not_object.returncode != 0 and "must be a JSON object" in not_object.stderr


def test_call_without_a_daemon_exits_1_with_a_clear_message(tmp_path: pathlib.Path) -> None:
    missing = run_depot("call", "ping", "--data-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 1
    assert "no daemon" in missing.stderr and "depot.sock" in missing.stderr
    silent = run_depot("call", "ping", "--connect", f"tcp://127.0.0.1:{free_port()}", "--timeout", "1")
    assert silent.returncode == 1
    assert "no daemon answered" in silent.stderr
    bad = run_depot("call", "ping", "--connect", "udp://somewhere")
    assert bad.returncode == 1 and "bad endpoint" in bad.stderr


# -- model ------------------------------------------------------------------------------------


def test_model_show_and_apply(daemon: Daemon, tmp_path: pathlib.Path) -> None:
    shown = run_depot("model", "show", "--connect", daemon.endpoint)
    assert shown.returncode == 0 and "Package" in shown.stdout and "unique (name, release)" in shown.stdout
    model = json.loads(run_depot("model", "show", "--json", "--connect", daemon.endpoint).stdout)
    package = next(e for e in model["entities"] if e["name"] == "Package")
    package["attributes"].append({"name": "homepage", "type": "string", "optional": True})
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"entities": model["entities"]}))
    applied = run_depot("model", "apply", str(path), "--connect", daemon.endpoint)
    assert applied.returncode == 0, applied.stderr
    assert "homepage" in applied.stdout
    again = run_depot("model", "apply", str(path), "--connect", daemon.endpoint, "--json")
    assert json.loads(again.stdout)["changes"] == []
    path.write_text("{nope")
    broken = run_depot("model", "apply", str(path), "--connect", daemon.endpoint)
    assert broken.returncode == 1 and "not valid JSON" in broken.stderr


# -- import -----------------------------------------------------------------------------------


def four_pages(tmp_path: pathlib.Path) -> pathlib.Path:
    """The catalogue as the seed describes it: number_of_pages says 5 but only pages 1-4 exist."""
    directory = tmp_path / "specs"
    directory.mkdir()
    for number in range(1, 5):
        shutil.copy(SPECS / f"page-{number}.json", directory / f"page-{number}.json")
    return directory


def test_import_twice_creates_nothing_new_and_updates_changed_rows(
        daemon: Daemon, clean_packages: depot.Client, tmp_path: pathlib.Path) -> None:
    client = clean_packages
    pages = four_pages(tmp_path)
    rows = sum(len(json.loads((pages / f"page-{n}.json").read_text())["result"]) for n in range(1, 5))
    unique = {(r["name"], r["version"]) for n in range(1, 5)
              for r in json.loads((pages / f"page-{n}.json").read_text())["result"]}

    first = run_depot(*import_args(daemon, str(pages)))
    summary = summary_of(first)
    assert first.returncode == 2, "a missing page is reported as skipped input"
    assert summary["missingPages"] == [5] and summary["pages"] == 5 and summary["pagesRead"] == 4
    assert any(p["page"] == 5 and "missing" in p["message"] for p in summary["problems"])
    assert summary["rows"] == rows
    assert summary["inserted"] == len(unique)
    assert "page 4/5" in first.stderr and "objects/s" in first.stderr, "progress goes to stderr"
    assert client.call("store/count", {"entity": "Package"})["count"] == len(unique)

    page = json.loads((pages / "page-2.json").read_text())
    changed = page["result"][:3]
    for row in changed:
        row["downloads_a_month"] += 1000
    (pages / "page-2.json").write_text(json.dumps(page))
    second = summary_of(run_depot(*import_args(daemon, str(pages))))
    assert second["inserted"] == 0, "a second import creates nothing new"
    assert second["updated"] >= len(changed)
    assert client.call("store/count", {"entity": "Package"})["count"] == len(unique)
    stored = {(o["name"], o["release"]): o for o in client.fetch({"entity": "Package"})["objects"]}
    for row in changed:
        assert stored[(row["name"], row["version"])]["downloads"] == row["downloads_a_month"]


def test_import_reports_bad_rows_and_pages_with_page_and_index(
        daemon: Daemon, clean_packages: depot.Client, tmp_path: pathlib.Path) -> None:
    directory = tmp_path / "bad"
    directory.mkdir()
    good = [{"name": f"pkg{i}", "version": "1.0", "downloads_a_month": i, "summary": None} for i in range(6)]
    page1 = good[:3] + [{"name": "no-version", "downloads_a_month": 1},
                        {"name": "wrong-type", "version": "1.0", "downloads_a_month": "many"},
                        "not an object"]
    (directory / "page-1.json").write_text(json.dumps({"number_of_pages": 3, "result": page1}))
    (directory / "page-2.json").write_text('{"number_of_pages": 3, "result": [')
    (directory / "page-3.json").write_text(json.dumps({"number_of_pages": 3, "result": good[3:]}))

    skipped = run_depot(*import_args(daemon, str(directory), "--batch-size", "2"))
    summary = summary_of(skipped)
    assert skipped.returncode == 2
    problems = {(p["page"], p.get("index")): p["message"] for p in summary["problems"]}
    assert "identity" in problems[(1, 3)] and "version" in problems[(1, 3)]
    assert "integer" in problems[(1, 4)] and "downloads" in problems[(1, 4)]
    assert "not an object" in problems[(1, 5)]
    assert "not valid JSON" in problems[(2, None)]
    assert summary["inserted"] == 6
    assert clean_packages.call("store/count", {"entity": "Package"})["count"] == 6
    human = run_depot(*import_args(daemon, str(directory))[:-1])
    assert "page 1 index 3: missing identity field 'version'" in human.stdout

    for o in clean_packages.fetch({"entity": "Package"})["objects"]:
        clean_packages.save(deleted=[{"id": o["id"]}])
    stopped = run_depot(*import_args(daemon, str(directory), "--batch-size", "2", "--on-error", "stop"))
    summary = summary_of(stopped)
    assert stopped.returncode == 1 and summary["stopped"] is True
    assert len(summary["problems"]) == 1 and summary["problems"][0]["index"] == 3
    count = clean_packages.call("store/count", {"entity": "Package"})["count"]
    assert count == summary["inserted"] == 2, "only whole batches before the bad row were committed"


def test_import_from_a_loopback_url_template(daemon: Daemon, clean_packages: depot.Client,
                                             tmp_path: pathlib.Path) -> None:
    pages = four_pages(tmp_path)
    handler = functools.partial(QuietHandler, directory=str(pages))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/page-{{page}}.json"
        process = run_depot(*import_args(daemon, url, "--batch-size", "1000"))
        summary = summary_of(process)
        assert summary["missingPages"] == [5]
        assert "404" in next(p["message"] for p in summary["problems"] if p["page"] == 5)
        assert summary["pagesRead"] == 4 and summary["inserted"] > 1500
    finally:
        server.shutdown()
    remote = run_depot(*import_args(daemon, "http://example.com/page-{page}.json"))
    assert remote.returncode != 0 and "loopback" in remote.stderr


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def test_ctrl_c_cancels_cleanly_without_a_half_committed_batch(
        daemon: Daemon, clean_packages: depot.Client, tmp_path: pathlib.Path) -> None:
    if not os.path.exists(DEPOT):
        pytest.skip(f"depot not built at {DEPOT}")
    directory = tmp_path / "big"
    directory.mkdir()
    pages, per_page, batch = 40, 1000, 500
    for number in range(1, pages + 1):
        rows = [{"name": f"big{number}-{i}", "version": "1", "downloads_a_month": i, "summary": "x" * 40}
                for i in range(per_page)]
        (directory / f"page-{number}.json").write_text(json.dumps({"number_of_pages": pages, "result": rows}))
    process = subprocess.Popen([DEPOT, *import_args(daemon, str(directory), "--batch-size", str(batch))],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first_progress = process.stderr.readline()
        assert first_progress.startswith("page 1/"), first_progress
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    if process.returncode == 0:
        pytest.skip("the import finished before Ctrl-C arrived")
    assert process.returncode == 130, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["interrupted"] is True
    count = clean_packages.call("store/count", {"entity": "Package"})["count"]
    assert count < pages * per_page
    assert count % batch == 0, f"{count} objects: a batch was half committed"
    assert count == summary["inserted"]


# -- watch ------------------------------------------------------------------------------------


def test_watch_streams_the_table_and_each_change_as_json(daemon: Daemon) -> None:
    with daemon.client() as client:
        try:
            client.call("results/subscribe", {"request": {"entity": "Team", "sort": [{"key": "teamName"}]},
                                              "include": "none"})
        except depot.MethodNotFoundError:
            refused = run_depot("watch", "Team", "--sort", "teamName", "--connect", daemon.endpoint)
            assert refused.returncode == 1 and "results/subscribe" in refused.stderr
            pytest.skip("depotd does not serve results/subscribe yet (-32601): checked watch's clear refusal only")
        process = subprocess.Popen(
            [DEPOT, "watch", "Team", "--sort", "qualifyingZone", "--sort", "teamName", "--section", "qualifyingZone",
             "--json", "--max-changes", "1", "--connect", daemon.endpoint],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            snapshot = json.loads(process.stdout.readline())
            assert snapshot["event"] == "snapshot"
            before = snapshot["count"]
            saved = client.save(inserted=[{"entity": "Team", "tempId": "w", "values": {
                "teamName": "Watched FC", "qualifyingZone": "Antarctica"}}])
            change = json.loads(process.stdout.readline())
            assert change["event"] == "change" and change["transaction"] == saved["transaction"]
            assert any(o["type"] == "insert" and o["id"] == saved["ids"]["w"] for o in change["objects"])
            assert process.wait(30) == 0
            assert before >= 0
        finally:
            if process.poll() is None:
                process.kill()


def test_watch_of_a_grouped_request_streams_the_groups_and_their_changes(daemon: Daemon) -> None:
    with daemon.client() as client:
        saved = client.save(inserted=[
            {"entity": "Team", "tempId": f"g{i}", "values": {"teamName": f"Grouped {i}", "qualifyingZone": zone,
                                                            "wins": i}}
            for i, zone in enumerate(["Watch-A", "Watch-A", "Watch-B"])])
        ids = [saved["ids"][f"g{i}"] for i in range(3)]
        grouping = ["--group-by", "qualifyingZone", "--count", "--sum", "wins", "--sort", "count:desc"]
        process = subprocess.Popen(
            [DEPOT, "watch", "Team", "--predicate", "qualifyingZone BEGINSWITH 'Watch-'", *grouping,
             "--json", "--max-changes", "1", "--connect", daemon.endpoint],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            snapshot = json.loads(process.stdout.readline())
            assert snapshot["event"] == "snapshot"
            # Each group row carries the id the daemon gives it.
            assert [o for s in snapshot["sections"] for o in s["objects"]] == [
                {"id": 'group:["Watch-A"]', "qualifyingZone": "Watch-A", "count": 2, "sum_wins": 1},
                {"id": 'group:["Watch-B"]', "qualifyingZone": "Watch-B", "count": 1, "sum_wins": 2}]
            # One team moves to a zone of its own: the group it left changes, a new one appears.
            moved = client.save(updated=[{"id": ids[0], "values": {"qualifyingZone": "Watch-C"}}])
            change = json.loads(process.stdout.readline())
            assert change["event"] == "change" and change["transaction"] == moved["transaction"]
            assert {(o["type"], o["id"]) for o in change["objects"]} == {
                ("move", 'group:["Watch-A"]'), ("insert", 'group:["Watch-C"]')}
            assert process.wait(30) == 0
        finally:
            if process.poll() is None:
                process.kill()
            client.save(deleted=[{"id": i} for i in ids])
