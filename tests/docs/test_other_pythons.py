"""scripts/other_pythons.sh (make test-other-pythons): what it reports without running the lessons.

The lessons themselves run there on Python 3.12 and 3.13 (minutes each, in .venv/other/3.X); these
checks cost a second: a Python the machine lacks is named and skipped, none found is a failure, and
the skip decision is labkit.lab.sqlite_check's exit status and first line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_python_the_machine_lacks_is_named_and_none_found_fails():
    env = {**os.environ, "PYTHONS": "3.98 3.99", "HOME": "/nonexistent"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "other_pythons.sh")], capture_output=True, text=True,
                          timeout=60, env=env, cwd=ROOT)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "Python 3.98: not on this machine (no python3.98, no ~/.pyenv/versions/3.98.*): skipped" in lines
    assert "Python 3.99: not on this machine (no python3.99, no ~/.pyenv/versions/3.99.*): skipped" in lines
    assert lines[-1] == "no other Python found: nothing was tested"


def test_the_skip_decision_is_the_sqlite_check_s_exit_status_and_first_line():
    done = subprocess.run([sys.executable, "-m", "labkit.lab.sqlite_check", "03"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("SQLite ") and len(done.stdout.splitlines()) == 1
    script = (ROOT / "scripts" / "other_pythons.sh").read_text()
    assert '-m labkit.lab.sqlite_check $ask' in script and "SKIPPED $name" in script


def test_nbval_skips_a_lesson_whose_sqlite_feature_is_missing_with_the_check_s_line(monkeypatch):
    """The root conftest.py: the lesson's cells (and 00_setup_check's) are skipped with the reason; others run."""
    import importlib.util

    from labkit.lab import sqlite_check

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    assert spec and spec.loader
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    asked: list[str | None] = []

    def problems(lesson=None):
        asked.append(lesson)
        return ["lesson 14 needs a feature: what to do"] if lesson in (None, "14") else []

    monkeypatch.setattr(sqlite_check, "problems", problems)

    class Item:
        def __init__(self, name: str):
            self.path = ROOT / "notebooks" / name
            self.markers: list = []

        def add_marker(self, marker) -> None:
            self.markers.append(marker)

    items = [Item("00_setup_check.ipynb"), Item("03_durable_checkpoint.ipynb"), Item("14_choosing_an_engine.ipynb"),
             Item("14_choosing_an_engine.ipynb"), Item("test_x.py")]
    class Config:  # without --run-all-again
        def getoption(self, name: str, default=None):
            return default

    conftest.pytest_collection_modifyitems(Config(), items)
    reasons = [[m.kwargs.get("reason") for m in item.markers] for item in items]
    assert reasons == [["lesson 14 needs a feature: what to do"], [], ["lesson 14 needs a feature: what to do"],
                       ["lesson 14 needs a feature: what to do"], []]
    assert sorted(asked, key=str) == sorted([None, "03", "14"], key=str)
