"""Fixtures for Depot Studio's browser tests: a real depotd, a real `depot studio`, a real headless Chromium.

``DEPOTD`` and ``DEPOT`` name the built binaries (``make test-browser`` sets them); otherwise
``.build/debug/`` of the repository. ``CHROMIUM`` and ``CHROMEDRIVER`` override the browser and its
driver (default: Debian's ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``). Screenshots of every
page go to a temporary folder printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

REPO = pathlib.Path(__file__).resolve().parents[2]
DEPOTD = os.environ.get("DEPOTD", str(REPO / ".build" / "debug" / "depotd"))
DEPOT = os.environ.get("DEPOT", str(REPO / ".build" / "debug" / "depot"))
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", shutil.which("chromedriver") or "/usr/bin/chromedriver")
MODEL = REPO / "Examples" / "worldcup-model.json"
TEAMS: List[Dict[str, Any]] = json.loads((REPO / "Tests" / "Fixtures" / "worldcup.json").read_text())["teams"]
SCREENSHOTS = pathlib.Path(tempfile.mkdtemp(prefix="depot-studio-screenshots-"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def read_line(process: subprocess.Popen, prefix: str, timeout: float = 30) -> str:
    """Reads the process's standard output until a line starts with ``prefix``; returns the rest of it."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            if process.poll() is not None:
                break
            continue
        seen.append(line)
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise RuntimeError(f"no line starting with {prefix!r} from {process.args[0]}: {''.join(seen)}")


class Daemon:
    """A depotd on a temporary data directory and a fixed loopback port, so it can be restarted in place."""

    def __init__(self) -> None:
        for binary in (DEPOTD, DEPOT):
            if not os.path.exists(binary):
                pytest.skip(f"{binary} is not built: run `swift build` or set DEPOTD/DEPOT")
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix="depot-browser-"))
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.process: Optional[subprocess.Popen] = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [DEPOTD, "--data-dir", str(self.directory), "--listen", self.endpoint, "--model", str(MODEL),
             "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        read_line(self.process, "depotd listening on ")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)

    def cli(self, *arguments: str) -> Any:
        """Runs `depot … --connect ENDPOINT --json` and returns its JSON output."""
        done = subprocess.run([DEPOT, *arguments, "--connect", self.endpoint, "--json"], capture_output=True,
                              text=True, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"depot {' '.join(arguments)} failed: {done.stderr}")
        return json.loads(done.stdout)

    def call(self, method: str, params: Dict[str, Any]) -> Any:
        """A request through the CLI: `depot call METHOD PARAMS`."""
        return self.cli("call", method, json.dumps(params))

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class Studio:
    """`depot studio` against a daemon, on a free loopback port."""

    def __init__(self, daemon: Daemon) -> None:
        self.process = subprocess.Popen([DEPOT, "studio", "--connect", daemon.endpoint, "--port", "0"],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.url = read_line(self.process, "depot studio on ")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()


def seed(daemon: Daemon) -> Dict[str, str]:
    """Inserts the 32 World Cup teams; returns their ids by name."""
    result = daemon.call("store/save", {"author": "seed", "inserted": [
        {"entity": "Team", "tempId": team["teamName"], "values": team} for team in TEAMS]})
    return result["ids"]


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    running = Daemon()
    running.ids = seed(running)
    yield running
    running.close()


@pytest.fixture(scope="module")
def studio(daemon: Daemon) -> Iterator[Studio]:
    running = Studio(daemon)
    yield running
    running.close()


def make_browser() -> webdriver.Chrome:
    if not os.path.exists(CHROMIUM) or not os.path.exists(CHROMEDRIVER):
        pytest.skip(f"chromium ({CHROMIUM}) or chromedriver ({CHROMEDRIVER}) missing: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,900", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver = make_browser()
    yield driver
    driver.quit()


def screenshot(driver: webdriver.Chrome, name: str) -> pathlib.Path:
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def console_errors(driver: webdriver.Chrome) -> List[Dict[str, Any]]:
    """Console messages of level SEVERE since the last call."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    shots = sorted(SCREENSHOTS.glob("*.png"))
    terminalreporter.write_line(f"Depot Studio screenshots ({len(shots)}): {SCREENSHOTS}")


__all__ = ["Daemon", "Studio", "seed", "make_browser", "screenshot", "console_errors", "free_port", "re"]
