"""The SQLite features the lessons use, probed on the SQLite this Python links: one line per missing one.

A minimum version is not enough to say: what DBOS (lesson 14) asks of SQLite depends on the Python
it runs on. DBOS 3.4 stamps its rows with ``unixepoch('subsec')`` on Python 3.12 and later (SQLite
3.42 and later answer it; 3.40, which many 3.12 and 3.13 builds link, answers NULL and 8 of lesson
14's 12 cells fail) and with ``strftime('%s','now')`` before. So each feature is probed by running
it, DBOS's with the very expression DBOS would use here.

``problems()`` (every lesson, as 00_setup_check asks) or ``problems("14")`` (one lesson, as
``labkit.lab.lesson.start`` asks) returns one line per missing feature: the feature, the SQLite
version found, and what to do. An empty list means every feature is there.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..errors import LabError


class SQLiteFeatureMissing(LabError):
    """A lesson needs a SQLite feature this Python's SQLite lacks (one line: which, the version, what to do)."""


def _dbos_timestamp_expression() -> str:
    """The SQL DBOS stamps its SQLite rows with on this Python (its own function, when DBOS is installed)."""
    try:
        from dbos._migration import get_sqlite_timestamp_expr
    except ImportError:  # no DBOS (or a DBOS that moved it): what DBOS 3.4 does
        return "(unixepoch('subsec') * 1000)" if sys.version_info >= (3, 12) else "(strftime('%s','now') * 1000)"
    return str(get_sqlite_timestamp_expr())


def _runs(*statements: str) -> Callable[[sqlite3.Connection], bool]:
    def probe(conn: sqlite3.Connection) -> bool:
        rows = [conn.execute(statement).fetchall() for statement in statements]
        return all(row is not None and None not in row for result in rows for row in result)
    return probe


def _dbos_timestamp(conn: sqlite3.Connection) -> bool:
    (value,) = conn.execute(f"SELECT {_dbos_timestamp_expression()}").fetchone()
    return value is not None


def _wal(conn: sqlite3.Connection) -> bool:
    with tempfile.TemporaryDirectory(prefix="labkit-sqlite-check-") as folder:
        with closing(sqlite3.connect(Path(folder) / "probe.db")) as file_conn:
            return str(file_conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower() == "wal"


@dataclass(frozen=True)
class Feature:
    name: str
    since: str  # the first SQLite version that has it
    used_by: str
    lessons: tuple[str, ...]  # () means every lesson
    probe: Callable[[sqlite3.Connection], bool]


FEATURES: tuple[Feature, ...] = (
    Feature("STRICT tables", "3.37", "labkit's schema", (),
            _runs("CREATE TEMP TABLE probe_strict (x INTEGER NOT NULL) STRICT")),
    Feature("RETURNING", "3.35", "labkit's store", (),
            _runs("CREATE TEMP TABLE probe_returning (x INTEGER)", "INSERT INTO probe_returning VALUES (1) RETURNING x")),
    Feature("JSON functions", "3.38", "labkit's reports", (),
            _runs("SELECT json_array(1), (SELECT json_group_array(value) FROM json_each('[1, 2]'))")),
    Feature("window functions", "3.25", "labkit's reports", (), _runs("SELECT count(*) OVER () FROM (SELECT 1)")),
    Feature("WAL journal mode", "3.7", "labkit.connect", (), _wal),
    Feature("unixepoch('subsec')", "3.42", "DBOS on Python 3.12 and later", ("14",), _dbos_timestamp),
)


def _works(feature: Feature) -> bool:
    try:
        with closing(sqlite3.connect(":memory:")) as conn:
            return feature.probe(conn)
    except sqlite3.Error:
        return False


def _advice(feature: Feature) -> str:
    if feature.lessons == ("14",):
        return ("run the lab on Python 3.11 (make lab PYTHON=python3.11), where DBOS does not use it, "
                f"or on a Python whose sqlite3 links SQLite {feature.since} or later")
    return f"use a Python whose sqlite3 links SQLite {feature.since} or later"


def missing(lesson: str | None = None) -> list[Feature]:
    """The features this SQLite lacks: those every lesson uses, and one lesson's own (all lessons' if None)."""
    wanted = [f for f in FEATURES if lesson is None or not f.lessons or lesson in f.lessons]
    return [feature for feature in wanted if not _works(feature)]


def problems(lesson: str | None = None) -> list[str]:
    """One line per missing feature: what needs it, the SQLite and Python found, and what to do."""
    python = ".".join(map(str, sys.version_info[:3]))
    lines = []
    for feature in missing(lesson):
        who = f"lesson {', '.join(feature.lessons)} needs" if feature.lessons else "every lesson needs"
        lines.append(f"{who} {feature.name} (SQLite {feature.since}+, for {feature.used_by}); this Python {python} "
                     f"links SQLite {sqlite3.sqlite_version}: {_advice(feature)}")
    return lines


def require_for(lesson: str) -> None:
    """Stop a lesson's setup cell with one line when a feature it needs is missing (labkit.lab.lesson.start)."""
    found = problems(lesson)
    if found:
        raise SQLiteFeatureMissing(found[0])


if __name__ == "__main__":  # python -m labkit.lab.sqlite_check: the lines, exit 1 if any
    found = problems(sys.argv[1] if len(sys.argv) > 1 else None)
    print("\n".join(found) or f"SQLite {sqlite3.sqlite_version}: every feature the lessons use is there")
    sys.exit(1 if found else 0)
