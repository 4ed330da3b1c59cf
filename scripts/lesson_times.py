"""Measure how long each lesson takes to read and to do, and write it into the lesson's header.

    python scripts/lesson_times.py                      # print the table
    python scripts/lesson_times.py --write [NOTEBOOK]   # also update the "Reading ... min" line
                                                        # of each notebook named (default: all)

What is counted, per lesson and per section (a ``## `` heading; "(optional)" in the heading
marks it optional, every other section is core):

- prose: the words of every Markdown cell, without code blocks, diagrams or folded solutions;
- code: the characters of every code cell except the learner's answer cells, each run of
  spaces counted as one, so that splitting a long line in two does not make it slower to read;
- an exercise (``### Exercise`` heading): the words of its prompt and the lines of its solution.

Minutes follow from those counts at fixed rates, chosen for a careful first reading of
technical material and written down here so that anyone can check or change them:

- prose at 130 words a minute (between Carver's "learning" and "memorising" reading rates,
  138 to 200 words a minute, slowed a little for diagrams and tables);
- code at 400 characters a minute: 8 lines of 50 characters (read it, run it);
- what the cells print: the words of every code cell's text output (printed lines, tables as
  text, a refusal's message) at 200 words a minute: a table or a log is scanned for the
  row that matters, faster than prose is read, but it is read (a lesson's claim is in it);
- an exercise: its prompt at the prose rate, 1.5 minutes per line of its solution (write,
  run, read the feedback, fix), and 3 minutes to understand the task and run the check;
- waiting: the seconds the lesson's cells take to run (Run All on an idle two-core machine,
  kept in ``docs/run-times.json`` and written by ``scripts/run_notebooks.py --record-times``).

These are figures measured from the text and the runs, not timings of learners. A careful
tester who worked through lessons 07 to 14 needed more than the text alone predicted, and
most of the gap was the outputs, which the first version of this script did not count.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROSE_WPM = 130
OUTPUT_WPM = 200
RUN_TIMES = ROOT / "docs" / "run-times.json"
CODE_CHARACTERS_PER_MINUTE = 400
MINUTES_PER_SOLUTION_LINE = 1.5
MINUTES_PER_EXERCISE = 3
HEADER = re.compile(r"^Reading \d+ min.*?· Exercises [^·]*·", re.MULTILINE)
HEADER_LINE = re.compile(r"^Reading \d+ min.*$", re.MULTILINE)
FENCE = re.compile(r"```.*?```", re.DOTALL)
DETAILS = re.compile(r"<details>.*?</details>", re.DOTALL)
WORD = re.compile(r"[A-Za-z0-9][\w'’-]*")


@dataclass
class Section:
    title: str
    optional: bool
    words: int = 0
    code_characters: int = 0
    output_words: int = 0
    exercises: list[tuple[str, bool, int, int]] = field(default_factory=list)  # (number, optional, words, solution lines)

    @property
    def reading(self) -> float:
        return self.words / PROSE_WPM + self.code_characters / CODE_CHARACTERS_PER_MINUTE + self.output_words / OUTPUT_WPM

    def exercise_minutes(self, core_only: bool) -> float:
        return sum(
            words / PROSE_WPM + lines * MINUTES_PER_SOLUTION_LINE + MINUTES_PER_EXERCISE
            for _, optional, words, lines in self.exercises
            if not (core_only and (optional or self.optional))
        )


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def _words(markdown: str) -> int:
    # The header line this script writes is not counted: counting it made the result depend on
    # what was written last, and a lesson near a minute's boundary flipped on every --write.
    text = HEADER_LINE.sub(" ", markdown)
    return len(WORD.findall(FENCE.sub(" ", DETAILS.sub(" ", text))))


def _output_words(cell: dict) -> int:
    """Words a learner reads in a code cell's outputs: printed text, text tables, a refusal's message."""
    text = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text.append(_text(output.get("text", "")))
        elif output.get("output_type") in ("display_data", "execute_result"):
            text.append(_text(output.get("data", {}).get("text/plain", "")))
        elif output.get("output_type") == "error":
            text.append(str(output.get("evalue", "")))
    return len(WORD.findall(" ".join(text)))


def sections(path: Path) -> list[Section]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    found = [Section("(introduction)", False)]
    exercise: tuple[str, bool] | None = None
    exercise_words = 0
    for cell in notebook["cells"]:
        source = _text(cell["source"])
        current = found[-1]
        if cell["cell_type"] == "markdown":
            heading = source.lstrip().splitlines()[0] if source.strip() else ""
            if heading.startswith("## "):
                found.append(Section(heading[3:].strip(), "(optional)" in heading.lower()))
                exercise = None
                current = found[-1]
            if heading.startswith("### Exercise"):
                number = heading.split()[2].rstrip(":")
                exercise, exercise_words = (number, "(optional)" in heading.lower()), _words(source)
                continue
            current.words += _words(source)
        elif cell["cell_type"] == "code":
            metadata = cell.get("metadata", {})
            if "exercise" in metadata and exercise is not None:
                solution = metadata.get("solution", "").splitlines()
                lines = len([line for line in solution if line.strip() and not line.strip().startswith("#")])
                current.exercises.append((exercise[0], exercise[1], exercise_words, lines))
                exercise = None
                continue
            current.code_characters += sum(len(" ".join(line.split())) for line in source.splitlines())
            current.output_words += _output_words(cell)
    return found


def waiting_minutes(path: Path) -> float:
    """Minutes the lesson's cells take to run, as recorded; 0 for a lesson not recorded yet."""
    if not RUN_TIMES.exists():
        return 0.0
    return json.loads(RUN_TIMES.read_text(encoding="utf-8")).get(path.stem, 0.0) / 60


def minutes(value: float) -> int:
    """Round up to whole minutes, and to 5 above 10: a header should not pretend to more precision."""
    whole = math.ceil(value)
    return whole if whole <= 10 else 5 * math.ceil(whole / 5)


def lesson_times(path: Path) -> dict[str, int]:
    found = sections(path)
    waiting = waiting_minutes(path)  # counted with the core reading: the core cells are most of it
    return {
        "reading": minutes(sum(s.reading for s in found) + waiting),
        "reading_core": minutes(sum(s.reading for s in found if not s.optional) + waiting),
        "exercises": minutes(sum(s.exercise_minutes(core_only=False) for s in found)),
        "exercises_core": minutes(sum(s.exercise_minutes(core_only=True) for s in found)),
    }


def header(times: dict[str, int]) -> str:
    reading = f"Reading {times['reading']} min"
    if times["reading_core"] != times["reading"]:
        reading += f" (core {times['reading_core']})"
    exercises = f"Exercises {times['exercises']} min" if times["exercises"] else "Exercises none"
    if times["exercises"] and times["exercises_core"] != times["exercises"]:
        exercises += f" (core {times['exercises_core']})"
    return f"{reading} · {exercises} ·"


def write_header(path: Path) -> bool:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    first = notebook["cells"][0]
    source = _text(first["source"])
    updated = HEADER.sub(header(lesson_times(path)), source, count=1)
    if updated == source:
        return False
    first["source"] = updated.splitlines(keepends=True)
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


def main(args: list[str]) -> int:
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    named = {Path(arg).resolve() for arg in args if not arg.startswith("--")}
    to_write = named or set(paths)
    totals = dict.fromkeys(("reading", "reading_core", "exercises", "exercises_core"), 0)
    print(f"{'lesson':<32} {'reading':>8} {'core':>5} {'exercises':>10} {'core':>5}")
    for path in paths:
        times = lesson_times(path)
        for key in totals:
            totals[key] += times[key]
        row = [times[key] for key in ("reading", "reading_core", "exercises", "exercises_core")]
        print(f"{path.stem:<32} {row[0]:>8} {row[1]:>5} {row[2]:>10} {row[3]:>5}")
        if "--write" in args and path.resolve() in to_write and write_header(path):
            print(f"  updated the header of {path.name}")
    row = [totals[key] for key in ("reading", "reading_core", "exercises", "exercises_core")]
    print(f"{'all lessons (minutes)':<32} {row[0]:>8} {row[1]:>5} {row[2]:>10} {row[3]:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
