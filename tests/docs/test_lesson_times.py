"""Each lesson's header states the reading and exercise times measured from its text.

The figures come from scripts/lesson_times.py (prose, code characters, printed output, run
time and exercise solutions at the rates written there). A lesson edited without updating its
header fails here: run `python scripts/lesson_times.py --write`. The core path of the lessons
a three-hour workshop teaches (01 to 05: 00 is done before, 06 is the stretch lesson) must fit
with an opening, a break, a close and a buffer.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("lesson_times", ROOT / "scripts" / "lesson_times.py")
assert _spec and _spec.loader
lesson_times = importlib.util.module_from_spec(_spec)
sys.modules["lesson_times"] = lesson_times  # dataclasses look their module up there
_spec.loader.exec_module(lesson_times)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FIRST_LESSONS = [path for path in NOTEBOOKS if path.name[:2] <= "06"]
#: The lessons the three-hour plan teaches (00 is done before the day, 06 is the stretch lesson), and the
#: minutes they may take: three hours, less a 10-minute opening, a 10-minute break, a 5-minute close and a
#: 10-minute buffer (a room's first exercise runs long).
WORKSHOP_LESSONS = [path for path in NOTEBOOKS if "01" <= path.name[:2] <= "05"]
WORKSHOP_CORE_MINUTES = 180 - 10 - 10 - 5 - 10


def _header_line(path: Path) -> str:
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
    source = "".join(first["source"])
    [line] = [line for line in source.splitlines() if line.startswith("Reading ")]
    return line


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_header_states_the_measured_times(path):
    expected = lesson_times.header(lesson_times.lesson_times(path))
    assert _header_line(path).startswith(expected), "run: python scripts/lesson_times.py --write"


def test_the_core_path_of_the_workshop_lessons_fits_three_hours_with_a_buffer():
    total = sum(t["reading_core"] + t["exercises_core"] for t in map(lesson_times.lesson_times, WORKSHOP_LESSONS))
    assert 0 < total <= WORKSHOP_CORE_MINUTES, f"the core path of 01-05 takes {total} min"


def test_the_measure_counts_what_it_says(tmp_path):
    """A made-up lesson with known counts: 260 words of prose, 800 characters of code, 200 words printed, one exercise."""
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# 99 · Test\nReading 0 min · Exercises 0 min · Prerequisites: none\n"
             + "word " * 255},
            # 16 lines of 50 characters, the inner runs of spaces counted once: 16 * 50 = 800 characters
            {"cell_type": "code", "metadata": {}, "source": ("x = " + "1" * 43 + "  +0\n") * 16, "execution_count": None,
             "outputs": [{"output_type": "stream", "name": "stdout", "text": "printed " * 200}]},
            {"cell_type": "markdown", "metadata": {}, "source": "## 1. More (optional)\n" + "word " * 126},
            {"cell_type": "markdown", "metadata": {}, "source": "### Exercise 99.1 (5 min): try\n" + "word " * 125},
            {"cell_type": "code", "metadata": {"exercise": "99.1", "solution": "a = 1\nb = 2\n"}, "source": "a = None",
             "outputs": [], "execution_count": None},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    path = tmp_path / "99_test.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    times = lesson_times.lesson_times(path)
    # core: (255 + 2 title words; the "Reading ..." header line is not counted) / 130 + 800 / 400 + 200 / 200 = 4.98 -> 5;
    # all: + 130 / 130 -> 6 (no recorded run time for a made-up lesson: no waiting)
    assert (times["reading_core"], times["reading"]) == (5, 6)
    # the exercise sits in an optional section: 131 / 130 + 2 * 1.5 + 3 = 7.01 -> 8, none of it core
    assert (times["exercises"], times["exercises_core"]) == (8, 0)


def test_the_readme_table_states_the_same_minutes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        times = lesson_times.lesson_times(path)
        exercises = f"{times['exercises']} ({times['exercises_core']})" if times["exercises"] else "none"
        row = f"| {times['reading']} ({times['reading_core']}) | {exercises} |"
        line = next((line for line in readme.splitlines() if line.startswith(f"| `{path.stem}`")), "")
        assert line.endswith(row), f"README's row for {path.stem} should end with {row!r}: {line!r}"
    core = sum(t["reading_core"] + t["exercises_core"] for t in map(lesson_times.lesson_times, FIRST_LESSONS))
    assert f"00 to 06 comes to {core} minutes" in " ".join(readme.split())
