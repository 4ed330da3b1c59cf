"""The code passes its linter and its type checker, as part of the one test command.

ruff (pyflakes, pycodestyle, import order, bugbear, pyupgrade) over the package, tests and
scripts, and mypy over the package; both pinned in requirements.txt and configured in
pyproject.toml. Run here rather than in a separate step so that `make test` (or plain
`pytest`) is the one command a contributor and CI need.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing():
    done = _run("mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert done.returncode == 0, done.stdout + done.stderr
