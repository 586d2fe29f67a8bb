"""The package as users install it: typed (``py.typed``, ``mypy --strict`` clean), built from pyproject.toml."""

from __future__ import annotations

import importlib.metadata
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent


def test_mypy_strict_passes_on_the_public_module() -> None:
    pytest.importorskip("mypy", reason="mypy is in requirements-dev.txt (make setup-python installs it)")
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "depot"], cwd=PACKAGE,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_package_is_marked_typed_and_builds_from_pyproject() -> None:
    assert (PACKAGE / "depot" / "py.typed").is_file()
    assert (PACKAGE / "pyproject.toml").is_file()
    assert not (PACKAGE / "setup.cfg").exists() and not (PACKAGE / "setup.py").exists()


def test_installed_distribution_ships_py_typed_and_left_no_build_directory() -> None:
    try:
        files = importlib.metadata.files("depot-client") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("depot-client is not installed (make setup-python installs it into .venv)")
    assert any(str(f).replace("\\", "/").endswith("depot/py.typed") for f in files)
    assert not (PACKAGE / "build").exists(), "installing must not leave build/ in the tree"
