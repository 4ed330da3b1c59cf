"""Strict nbval over notebooks/: a lesson needing a SQLite feature this Python's SQLite lacks is SKIPPED.

labkit.lab.sqlite_check probes each feature the lessons use (for example DBOS's unixepoch('subsec'),
which lesson 14 needs on Python 3.12 and later and SQLite before 3.42 answers with NULL). Such a
lesson's cells are reported as skipped with that check's one line (the feature, the SQLite found,
what to do): not failed eight cells deep, and not silently passed. 00_setup_check, which checks every
feature, is skipped too where one is missing. Where every feature is there, nothing changes.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lessons = {item.path.name[:2] for item in items if item.path.suffix == ".ipynb" and item.path.name[:2].isdigit()}
    if not lessons:
        return
    from labkit.lab import sqlite_check

    reasons = {lesson: sqlite_check.problems(None if lesson == "00" else lesson) for lesson in lessons}
    for item in items:
        found = reasons.get(item.path.name[:2]) if item.path.suffix == ".ipynb" else None
        if found:
            item.add_marker(pytest.mark.skip(reason=found[0]))
