"""The depot CLI as people type it: connection options before the subcommand, fetch (table, JSON,
progress), export paired with import, shell completion."""

from __future__ import annotations

import json
import pathlib
from typing import Iterator, List

import pytest

import depot
from conftest import Daemon
from test_cli import run_depot

ZONE = "CLI Fetch"


@pytest.fixture()
def teams(daemon: Daemon) -> Iterator[depot.Client]:
    """Five teams in their own zone, removed afterwards."""
    with daemon.client() as client:
        client.save(inserted=[{"entity": "Team", "values": {
            "teamName": f"CLI team {i}", "qualifyingZone": ZONE, "wins": i}} for i in range(5)])
        yield client
        current = client.fetch({"entity": "Team", "predicate": "qualifyingZone == %@", "arguments": [ZONE],
                                "resultType": "ids"})["ids"]
        client.save(deleted=[{"id": i} for i in current])


def test_connection_options_go_before_or_after_the_subcommand(daemon: Daemon) -> None:
    for args in (["--connect", daemon.endpoint, "call", "store/count", '{"entity": "Team"}'],
                 [f"--connect={daemon.endpoint}", "--timeout", "5", "call", "store/count", '{"entity": "Team"}'],
                 ["call", "store/count", '{"entity": "Team"}', "--connect", daemon.endpoint],
                 ["--connect", daemon.endpoint, "model", "show", "--json"],
                 ["--connect", daemon.endpoint, "ping"]):
        done = run_depot(*args)
        assert done.returncode == 0, f"{args}: {done.stderr}"
    before = run_depot("--data-dir", "/nonexistent-depot", "ping")
    assert before.returncode == 1 and "/nonexistent-depot" in before.stderr, before.stderr


def test_fetch_prints_a_table_filtered_sorted_and_limited(daemon: Daemon, teams: depot.Client) -> None:
    done = run_depot("--connect", daemon.endpoint, "fetch", "Team", "--predicate", f"qualifyingZone == '{ZONE}'",
                     "--sort", "wins:desc", "--limit", "3", "--columns", "teamName,wins")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["id", "teamName", "wins"]
    assert [line.split()[-1] for line in lines[2:]] == ["4", "3", "2"]
    assert "CLI team 4" in lines[2]
    assert "3 objects" in done.stderr


def test_fetch_json_with_arguments_and_bad_input(daemon: Daemon, teams: depot.Client) -> None:
    done = run_depot("fetch", "Team", "--predicate", "qualifyingZone == %@ AND wins >= %d",
                     "--arguments", json.dumps([ZONE, 3]), "--sort", "teamName", "--json",
                     "--connect", daemon.endpoint)
    assert done.returncode == 0, done.stderr
    objects = json.loads(done.stdout)
    assert [o["teamName"] for o in objects] == ["CLI team 3", "CLI team 4"]
    assert all(o["entity"] == "Team" and o["id"].startswith("Team/") for o in objects)
    bad_sort = run_depot("fetch", "Team", "--sort", "wins:sideways", "--connect", daemon.endpoint)
    assert bad_sort.returncode != 0 and "asc or desc" in bad_sort.stderr
    bad_key = run_depot("fetch", "Team", "--predicate", "color == 'red'", "--connect", daemon.endpoint)
    assert bad_key.returncode == 1 and "color" in bad_key.stderr and "-32602" in bad_key.stderr


def test_fetch_shows_progress_on_stderr_when_asked(daemon: Daemon, teams: depot.Client) -> None:
    done = run_depot("fetch", "Team", "--predicate", f"qualifyingZone == '{ZONE}'", "--batch-size", "1",
                     "--progress", "--json", "--connect", daemon.endpoint)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 5, "stdout stays clean JSON"
    assert "5/5 (100%)" in done.stderr, done.stderr


def test_export_pairs_with_import(daemon: Daemon, teams: depot.Client, tmp_path: pathlib.Path) -> None:
    exported = run_depot("--connect", daemon.endpoint, "export", "Team", "--predicate", f"qualifyingZone == '{ZONE}'",
                         "--sort", "teamName")
    assert exported.returncode == 0, exported.stderr
    rows: List[dict] = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [r["teamName"] for r in rows] == [f"CLI team {i}" for i in range(5)]
    assert "id" not in rows[0] and rows[0]["wins"] == 0
    path = tmp_path / "teams.jsonl"
    path.write_text(exported.stdout)

    # Change one, delete one, then import the export: find-or-create puts both back.
    ids = {o["teamName"]: o["id"] for o in teams.fetch({"entity": "Team", "predicate": "qualifyingZone == %@",
                                                         "arguments": [ZONE]})["objects"]}
    teams.save(updated=[{"id": ids["CLI team 1"], "values": {"wins": 99}}], deleted=[{"id": ids["CLI team 2"]}])
    imported = run_depot("import", str(path), "--entity", "Team", "--identity", "teamName", "--json",
                         "--connect", daemon.endpoint)
    assert imported.returncode == 0, imported.stderr
    summary = json.loads(imported.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 5 and summary["inserted"] == 1 and summary["updated"] >= 1, summary
    after = {o["teamName"]: o["wins"] for o in teams.fetch({"entity": "Team", "predicate": "qualifyingZone == %@",
                                                            "arguments": [ZONE]})["objects"]}
    assert after == {f"CLI team {i}": i for i in range(5)}

    # And through a pipe: export | import -.
    piped = run_depot("import", "-", "--entity", "Team", "--identity", "teamName", "--json",
                      "--connect", daemon.endpoint, input=exported.stdout)
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout.strip().splitlines()[-1])["inserted"] == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(exported.stdout.splitlines()[0] + "\n{not json\n")
    skipped = run_depot("import", str(bad), "--entity", "Team", "--identity", "teamName", "--json",
                        "--connect", daemon.endpoint)
    assert skipped.returncode == 2, skipped.stderr
    problems = json.loads(skipped.stdout.strip().splitlines()[-1])["problems"]
    assert len(problems) == 1 and "not JSON" in json.dumps(problems)


def test_shell_completion_scripts() -> None:
    for shell, marker in (("bash", "complete"), ("zsh", "#compdef"), ("fish", "complete")):
        done = run_depot("--generate-completion-script", shell)
        assert done.returncode == 0, done.stderr
        assert marker in done.stdout and "fetch" in done.stdout and "export" in done.stdout


def test_model_apply_keeps_the_current_entities(daemon: Daemon, tmp_path: pathlib.Path) -> None:
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"entities": [{"name": "CliExtra", "attributes": [
        {"name": "label", "type": "string"}]}]}))
    added = run_depot("--connect", daemon.endpoint, "model", "apply", str(extra), "--json")
    assert added.returncode == 0, added.stderr
    assert "added entity CliExtra" in json.loads(added.stdout)["changes"]
    shown = json.loads(run_depot("--connect", daemon.endpoint, "model", "show", "--json").stdout)
    names = {e["name"] for e in shown["entities"]}
    assert {"Team", "Package", "CliExtra"} <= names


def test_fetch_groups_with_aggregates_having_and_bad_names(daemon: Daemon, teams: depot.Client) -> None:
    zone = ["--predicate", "qualifyingZone BEGINSWITH 'CLI'", "--connect", daemon.endpoint]
    done = run_depot("fetch", "Team", "--group-by", "qualifyingZone", "--count", "--sum", "wins", "--avg", "wins",
                     "--min", "teamName", "--max", "wins", "--json", *zone)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"qualifyingZone": ZONE, "count": 5, "sum_wins": 10, "avg_wins": 2.0,
                                        "min_teamName": "CLI team 0", "max_wins": 4}]
    table = run_depot("fetch", "Team", "--group-by", "wins", "--count", "--sort", "wins:desc", "--limit", "2",
                      "--having", "wins >= 1", *zone)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["wins", "count"]
    assert [line.split() for line in lines[2:]] == [["4", "1"], ["3", "1"]]
    assert "2 groups" in table.stderr
    bad = run_depot("fetch", "Team", "--group-by", "qualifyingZone", "--sum", "teamName", *zone)
    assert bad.returncode == 1 and "-32602" in bad.stderr and "params.aggregates[0].key" in bad.stderr, bad.stderr
