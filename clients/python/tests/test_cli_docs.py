"""Every documented `depot` invocation, run against a real daemon: the examples in the CLI's --help
texts and the `depot ...` lines of the shell blocks in README.md and docs/*.md must parse (no unknown
option, no usage error), every --option a help text mentions must be one its command knows, and the
README's "Thirty seconds with the CLI" sequence must run for real on the World Cup model."""

from __future__ import annotations

import json
import os
import pathlib
import queue
import re
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from conftest import DEPOT, DEPOTD, REPO, WORLDCUP_MODEL, Daemon

#: ArgumentParser's exit status for a command line it cannot parse (EX_USAGE).
USAGE_STATUS = 64
#: What ArgumentParser writes on standard error for a command line it cannot parse.
USAGE_MARKERS = ("Unknown option", "Usage:", "Missing expected argument", "Unexpected argument",
                 "Missing value for", "is not a valid value", "Did you mean")
#: Seconds an invocation may run; one still running by then has parsed (watch, studio) and is stopped.
SETTLE_SECONDS = 4.0


@dataclass(frozen=True)
class Invocation:
    """One documented `depot` command line: its arguments (after `depot`), its standard input and origin."""

    arguments: Tuple[str, ...]
    stdin: Optional[str]
    origin: str

    def __str__(self) -> str:
        return f"{self.origin}: depot {shlex.join(self.arguments)}"


def is_depot(word: str) -> bool:
    """Whether a command word is the CLI (`depot`, `.build/debug/depot`), not depotd or another tool."""
    return word == "depot" or word.endswith("/depot")


def shell_commands(lines: List[str]) -> Iterator[Tuple[int, List[str], Optional[str]]]:
    """Commands of a shell snippet: (line number, words with operators as words, here-document text).

    Joins backslash continuations and quotes that span lines, and reads `<<'END'` here-documents;
    `#` comments and `$ ` prompts are dropped, and so are lines of a prompt block's output."""
    prompted = any(line.startswith("$ ") for line in lines)
    index = 0
    while index < len(lines):
        start = index
        text = lines[index]
        index += 1
        if prompted:
            if not text.startswith("$ "):
                continue
            text = text[2:]
        words: Optional[List[str]] = None
        while True:
            if text.endswith("\\") and index < len(lines):
                text = text[:-1] + " " + lines[index]
                index += 1
                continue
            try:
                lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                words = list(lexer)
                break
            except ValueError:  # A quotation that continues on the next line.
                if index >= len(lines):
                    raise
                text += "\n" + lines[index]
                index += 1
        heredoc: Optional[str] = None
        if "<<" in words:
            position = words.index("<<")
            terminator = words[position + 1]
            del words[position:position + 2]
            body: List[str] = []
            while index < len(lines) and lines[index] != terminator:
                body.append(lines[index])
                index += 1
            index += 1
            heredoc = "\n".join(body) + "\n"
        if words:
            yield start + 1, words, heredoc


def depot_invocations(words: List[str], heredoc: Optional[str], origin: str) -> Iterator[Invocation]:
    """The `depot` commands of one shell command (redirections still in: see :func:`without_redirections`);
    a pipeline's other commands (`jq`, `echo`) are not run, so a `depot` reading a pipe gets empty input."""
    segment: List[str] = []
    for word in words + ["|"]:
        if word in ("|", "||", "&&", ";", "&"):
            if segment and is_depot(segment[0]):
                yield Invocation(tuple(segment[1:]), heredoc, origin)
            segment = []
        else:
            segment.append(word)


def without_redirections(invocation: Invocation) -> Invocation:
    """`invocation` with `> FILE`, `2> FILE` and `< FILE` removed (standard output is captured)."""
    kept: List[str] = []
    words = list(invocation.arguments)
    index = 0
    while index < len(words):
        if words[index] in (">", ">>", "<", "2>", "&>"):
            index += 2
            continue
        kept.append(words[index])
        index += 1
    return Invocation(tuple(kept), invocation.stdin, invocation.origin)


def markdown_invocations(path: pathlib.Path) -> List[Invocation]:
    """The `depot` lines of the shell blocks (```sh, ```bash, ```shell, ```console) of a Markdown file."""
    found: List[Invocation] = []
    block: Optional[List[str]] = None
    block_start = 0
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fence = line.strip()
        if block is None:
            if fence in ("```sh", "```bash", "```shell", "```console"):
                block, block_start = [], number
        elif fence == "```":
            for offset, words, heredoc in shell_commands(block):
                origin = f"{path.relative_to(REPO)}:{block_start + offset}"
                found.extend(without_redirections(i) for i in depot_invocations(words, heredoc, origin))
            block = None
        else:
            block.append(line)
    return found


def run_depot(arguments: List[str], cwd: pathlib.Path, stdin: Optional[str] = None,
              timeout: float = 60) -> "subprocess.CompletedProcess[str]":
    """Runs the CLI to completion."""
    return subprocess.run([DEPOT, *arguments], cwd=cwd, input=stdin or "", capture_output=True, text=True,
                          timeout=timeout)


def help_text(path: List[str], cwd: pathlib.Path) -> str:
    """`depot help SUBCOMMAND...`, which must succeed; unwrapped (a wide COLUMNS), so an example stays one line."""
    shown = subprocess.run([DEPOT, "help", *path], cwd=cwd, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "1000"})
    assert shown.returncode == 0, f"depot help {' '.join(path)}: {shown.stderr}"
    return shown.stdout


def subcommands(text: str) -> List[str]:
    """The names listed under SUBCOMMANDS: in a help text."""
    names: List[str] = []
    listing = False
    for line in text.splitlines():
        if line.startswith("SUBCOMMANDS:"):
            listing = True
        elif listing and not line.strip():
            listing = False
        elif listing and (match := re.match(r"^  ([a-z][a-z0-9-]*)(\s|$)", line)):
            if match.group(1) != "help":
                names.append(match.group(1))
    return names


def known_options(text: str) -> Set[str]:
    """The long options listed in a help text (`--name`, `--no-name`): under OPTIONS: and under the
    titled groups of options (`@OptionGroup(title:)`, e.g. GROUPING:)."""
    options: Set[str] = set()
    listing = False
    for line in text.splitlines():
        if re.match(r"^[A-Z][A-Z -]*:\s*$", line):
            listing = True
        elif listing and re.match(r"^\S", line):
            listing = False
        elif listing and re.match(r"^  -", line):
            options.update(re.findall(r"--[a-z][a-z0-9-]*", line.split("  ")[1] if line.startswith("  ") else line))
    return options


def help_pages(cwd: pathlib.Path) -> Dict[Tuple[str, ...], str]:
    """Every command's help text, by its path of subcommand names (the root's is the empty path)."""
    pages: Dict[Tuple[str, ...], str] = {}
    pending: List[Tuple[str, ...]] = [()]
    while pending:
        path = pending.pop()
        pages[path] = help_text(list(path), cwd)
        if len(path) < 3:  # depot, a command, a subcommand: no deeper
            pending.extend(path + (name,) for name in subcommands(pages[path]))
    return pages


def help_invocations(pages: Dict[Tuple[str, ...], str]) -> List[Invocation]:
    """The example lines (`depot ...`) of the help texts; a trailing `(or zsh, fish)` aside is not part of one."""
    found: List[Invocation] = []
    for path, text in pages.items():
        lines = [re.sub(r"\s{2,}\(.*\)$", "", line.strip()) for line in text.splitlines()]
        # The example lines, each with its continuation lines (after a trailing backslash).
        snippet: List[str] = []
        continued = False
        for line in lines:
            if line.startswith("depot ") or continued:
                snippet.append(line)
            continued = (line.startswith("depot ") or continued) and line.endswith("\\")
        origin = "depot help " + " ".join(path) if path else "depot --help"
        for _, words, heredoc in shell_commands(snippet):
            found.extend(without_redirections(i) for i in depot_invocations(words, heredoc, origin))
    return found


@pytest.fixture()
def workdir(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory to run the examples in: the repository's Examples and Tests (for the files they
    name), and ./depot-data, where the daemon below listens, as the README's `make run` does."""
    if not os.path.exists(DEPOT):
        pytest.skip(f"depot not built at {DEPOT}: run `swift build` or set DEPOT")
    directory = tmp_path
    for name in ("Examples", "Tests"):
        (directory / name).symlink_to(REPO / name)
    return directory


@pytest.fixture()
def docs_daemon(workdir: pathlib.Path) -> Iterator[Daemon]:
    """A fresh depotd on ./depot-data of the work directory with the World Cup model (what `make run`
    serves), on its default ipc endpoint, so `depot ...` finds it with no connection option, as documented."""
    data_dir = workdir / "depot-data"
    model = REPO / "Examples" / "worldcup-model.json"
    running = Daemon("--listen", f"ipc://{data_dir}/depot.sock", "--model", str(model), data_dir=str(data_dir))
    try:
        yield running
    finally:
        running.stop()


def assert_parses(invocation: Invocation, cwd: pathlib.Path) -> None:
    """Runs `invocation` (stopping it after a few seconds if it is still going) and fails on a usage error."""
    process = subprocess.Popen([DEPOT, *invocation.arguments], cwd=cwd, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(invocation.stdin or "", timeout=SETTLE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()  # Still running (watch, studio, a slow remote): it got past the parser.
        _, stderr = process.communicate()
        return
    marked = [marker for marker in USAGE_MARKERS if marker in stderr]
    assert process.returncode != USAGE_STATUS and not marked, \
        f"{invocation} does not parse (status {process.returncode}): {stderr.strip()}"


def test_the_examples_are_found() -> None:
    readme = markdown_invocations(REPO / "README.md")
    described = {" ".join(i.arguments[:2]) for i in readme}
    # The extractor sees the README's examples, multi-line quotes, here-documents and pipelines included.
    assert {"ping", "call model/get", "call store/save", "export Team", "model apply", "watch Team",
            "import teams.jsonl", "keys generate", "studio"} <= described, described
    applied = [i for i in readme if i.arguments[:3] == ("model", "apply", "-")]
    assert applied and all(i.stdin and json.loads(i.stdin)["entities"] for i in applied)
    saves = [i for i in readme if i.arguments[:2] == ("call", "store/save")]
    assert any("\n" in i.arguments[2] and json.loads(i.arguments[2])["inserted"] for i in saves)


def test_every_documented_invocation_parses(workdir: pathlib.Path, docs_daemon: Daemon) -> None:
    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    invocations = [i for path in documents for i in markdown_invocations(path)]
    invocations += help_invocations(help_pages(workdir))
    assert len(invocations) > 30
    for invocation in invocations:
        assert_parses(invocation, workdir)


def test_every_option_a_help_text_mentions_is_one_its_command_knows(workdir: pathlib.Path) -> None:
    """An option named in a help text is one the parser knows: the command's own, another `depot`
    command's (`connect with --server-key`), or, on a line about `depotd`, the daemon's."""
    pages = help_pages(workdir)
    # ArgumentParser's own root options (the completion script's is not listed under OPTIONS) and every command's.
    everywhere = {"--help", "--version", "--generate-completion-script"}.union(
        *(known_options(text) for text in pages.values()))
    daemon = subprocess.run([DEPOTD, "--help"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "1000"})
    daemon_options = known_options(daemon.stdout + daemon.stderr)
    assert "--curve-secret-key" in daemon_options
    for path, text in pages.items():
        own = known_options(text)
        for line in text.splitlines():
            allowed = everywhere | own | (daemon_options if "depotd" in line else set())
            for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
                assert option in allowed, \
                    f"depot help {' '.join(path)} mentions {option}, which no command takes: {line.strip()}"
    assert "--with-ids" in known_options(pages[("export",)])


class LineReader:
    """A process's standard output, line by line, with a deadline (a reader thread feeds a queue)."""

    def __init__(self, process: "subprocess.Popen[str]") -> None:
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.lines.put(line.rstrip("\n"))
            self.lines.put(None)
        threading.Thread(target=pump, daemon=True).start()

    def until(self, needle: str, seconds: float = 30) -> List[str]:
        """The lines up to and including the first that contains `needle`."""
        seen: List[str] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            if needle in line:
                return seen
        raise AssertionError(f"no line with {needle!r} in {seen}")


def test_thirty_seconds_with_the_cli_runs_as_written(workdir: pathlib.Path, docs_daemon: Daemon) -> None:
    readme = REPO / "README.md"
    text = readme.read_text()
    section = text.split("## Thirty seconds with the CLI", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()
    steps = [i for _, words, heredoc in shell_commands(block) for i in depot_invocations(words, heredoc, "README")]
    assert [" ".join(s.arguments[:2]) for s in steps] == [
        "ping", "call model/get", "call store/save", "call store/fetch", "call store/save", "call store/save",
        "fetch Team", "fetch Team", "watch Team", "call store/save"]
    with docs_daemon.client() as client:
        assert client.fetch({"entity": "Team"})["objects"] == [], "the sequence starts on an empty store"

    def run(step: Invocation) -> "subprocess.CompletedProcess[str]":
        return run_depot(list(step.arguments), workdir, step.stdin)

    ping = run(steps[0])
    assert ping.returncode == 0 and ping.stdout.startswith("pong from "), ping.stderr
    model = run(steps[1])
    assert model.returncode == 0, model.stderr
    assert {e["name"] for e in json.loads(model.stdout)["entities"]} == {e["name"] for e in WORLDCUP_MODEL["entities"]}
    saved = run(steps[2])
    assert saved.returncode == 0, saved.stderr
    assert json.loads(saved.stdout)["ids"] == {"br": "Team/1", "fr": "Team/2"}
    fetched = run(steps[3])
    assert fetched.returncode == 0, fetched.stderr
    assert [o["teamName"] for o in json.loads(fetched.stdout)["objects"]] == ["Brazil", "France"]
    first = run(steps[4])
    assert first.returncode == 0, first.stderr
    stale = run(steps[5])
    assert stale.returncode == 1 and json.loads(stale.stderr)["code"] == -32012, stale.stderr
    table = run(steps[6])
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["Team/1", "Team/2"] and "6" in rows[0], table.stdout
    grouped = run(steps[7])
    assert grouped.returncode == 0, grouped.stderr
    lines = grouped.stdout.splitlines()
    south, europe = (next(i for i, line in enumerate(lines) if zone in line) for zone in ("South America", "Europe"))
    assert south < europe, grouped.stdout  # sorted by the sum of wins, 6 before 4
    assert re.search(r"South America\s+1\s+6\b", lines[south]) and re.search(r"Europe\s+1\s+4\b", lines[europe]), \
        grouped.stdout

    watch = subprocess.Popen([DEPOT, *steps[8].arguments], cwd=workdir, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        output = LineReader(watch)
        snapshot = output.until("Team/1")
        assert snapshot[0].startswith("watching Team: 2 objects"), snapshot
        moved = run(steps[9])
        assert moved.returncode == 0, moved.stderr
        output.until("— transaction")
        change = output.until("Team/2")
        assert re.match(r"^  (move|update) Team/2 .*wins=7$", change[-1]), change
    finally:
        watch.kill()
        watch.wait(5)
    with docs_daemon.client() as client:
        wins = {o["teamName"]: o["wins"] for o in client.fetch({"entity": "Team"})["objects"]}
    assert wins == {"Brazil": 6, "France": 7}


def test_export_with_ids_as_its_help_says(workdir: pathlib.Path, docs_daemon: Daemon) -> None:
    with docs_daemon.client() as client:
        client.save(inserted=[{"entity": "Team", "values": {"teamName": "Peru", "qualifyingZone": "South America"}}])
    plain = run_depot(["export", "Team"], workdir)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == {"teamName": "Peru", "qualifyingZone": "South America", "wins": 0,
                                        "imageName": None}
    with_ids = run_depot(["export", "Team", "--with-ids"], workdir)
    assert with_ids.returncode == 0, with_ids.stderr
    line = json.loads(with_ids.stdout)
    assert (line["id"], line["entity"], line["version"], line["teamName"]) == ("Team/1", "Team", 1, "Peru")
