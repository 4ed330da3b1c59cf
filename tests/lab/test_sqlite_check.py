"""labkit.lab.sqlite_check: each SQLite feature the lessons use is probed, and a missing one is one line.

The issue it answers: on Python 3.12 and 3.13 built with SQLite 3.40, lesson 14 failed 8 of 12 cells
(DBOS stamps rows with unixepoch('subsec'), which SQLite before 3.42 answers with NULL) while
00_setup_check showed a tick. tests/docs/test_other_pythons.py runs the lessons on those Pythons.
"""

from __future__ import annotations

import sqlite3
import sys

import pytest

import labkit
from labkit.errors import LabError
from labkit.lab import sqlite_check
from labkit.lab.sqlite_check import FEATURES, Feature


def test_every_feature_is_probed_by_running_it():
    for feature in FEATURES:
        with sqlite3.connect(":memory:") as conn:
            assert isinstance(feature.probe(conn), bool), feature.name
    names = {feature.name for feature in FEATURES}
    assert {"STRICT tables", "RETURNING", "JSON functions", "unixepoch('subsec')"} <= names


def test_a_missing_feature_is_one_line_naming_it_the_version_found_and_what_to_do(monkeypatch):
    absent = Feature("a feature no SQLite has", "9.99", "a test", ("07",), lambda conn: bool(conn.execute("SELECT nope()")))
    monkeypatch.setattr(sqlite_check, "FEATURES", (*FEATURES, absent))
    [line] = [line for line in sqlite_check.problems() if "no SQLite has" in line]
    assert "\n" not in line
    assert line.startswith("lesson 07 needs a feature no SQLite has (SQLite 9.99+, for a test)")
    assert f"links SQLite {sqlite3.sqlite_version}" in line and "use a Python whose sqlite3 links SQLite 9.99" in line
    assert [line for line in sqlite_check.problems("03") if "no SQLite has" in line] == []  # not lesson 03's
    with pytest.raises(LabError) as refused:
        sqlite_check.require_for("07")
    assert str(refused.value) == line


def test_dbos_s_timestamp_is_probed_with_the_expression_dbos_uses_on_this_python(monkeypatch):
    from dbos._migration import get_sqlite_timestamp_expr

    assert sqlite_check._dbos_timestamp_expression() == get_sqlite_timestamp_expr()
    [dbos] = [feature for feature in FEATURES if "subsec" in feature.name]
    assert dbos.lessons == ("14",)
    monkeypatch.setattr(sys, "version_info", (3, 12, 1, "final", 0))  # DBOS reads it when asked
    found = sqlite_check.problems("14")
    if sqlite3.sqlite_version_info >= (3, 42, 0):
        assert found == []
    else:  # SQLite 3.40 here: exactly the reported failure, named in one line with what to do
        [line] = found
        assert "lesson 14 needs unixepoch('subsec')" in line and f"SQLite {sqlite3.sqlite_version}" in line
        assert "make lab PYTHON=python3.11" in line
        with pytest.raises(LabError, match="unixepoch"):
            labkit.lab.lesson.start("14")


def test_on_this_python_every_lesson_has_what_it_needs():
    assert sqlite_check.problems() == [] or sys.version_info >= (3, 12)
