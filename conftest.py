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


def _kernel_start_with_retries() -> None:
    """nbval starts a kernel per notebook; let a kernel that died at birth be started again, twice.

    A kernel is told its five ports in a file written before it starts; jupyter_client finds free
    ports by binding and releasing them, and on a machine where many kernels start at once (the
    unit tests run notebooks too, beside nbval) another process can take one in between, and the
    new kernel dies before it says hello ("Kernel died before replying to kernel_info": seen once in
    a CI run, on one notebook of fifteen). That is the harness failing to start, not a lesson
    failing: each retry is printed, and a kernel that dies three times still fails the notebook.
    """
    import nbval.kernel

    original = nbval.kernel.start_new_kernel

    def start_new_kernel(*args, **kwargs):
        for attempt in (1, 2, 3):
            try:
                return original(*args, **kwargs)
            except RuntimeError as error:
                if attempt == 3 or "died before replying" not in str(error):
                    raise
                print(f"\nnbval: a kernel died while starting ({error}); starting another (attempt {attempt + 1} of 3)")
        raise AssertionError("unreachable")

    nbval.kernel.start_new_kernel = start_new_kernel


_kernel_start_with_retries()
