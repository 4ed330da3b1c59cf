"""The instructor guide's live demo prints what the guide says, and its plans use the lessons' minutes.

docs/instructor-guide.md is read by someone about to type its demo in front of a room. So the demo's
```console blocks are run as written: every `$ ` line, in order, by one bash in a fresh folder, with
`python` the interpreter running these tests and labkit this repository's; what the commands print
(stdout and stderr interleaved, as a terminal shows them) must equal the lines the guide shows, exactly.
After a command that ends in `&`, the script waits until the lines the guide shows for it have appeared,
as the instructor waits to see them; that wait prints nothing. The demo runs twice at once: as written
(the clock pinned by its first line), and without that line and with LABKIT_CLOCK unset, since the
guide says the output is the same with real times.

The plans' minutes are checked against scripts/lesson_times.py (the figures in each lesson's header),
their start times against the minutes before them, and every notebook in notebooks/ must have its
objectives in the guide and a place in the full-day or the second-day plan: a new lesson fails here
until it joins.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from labkit.clock import CLOCK_ENV
from labkit.lab.processes import child_env

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "instructor-guide.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FIRST_LESSONS = [path for path in NOTEBOOKS if path.name[:2] <= "06"]

_spec = importlib.util.spec_from_file_location("lesson_times", ROOT / "scripts" / "lesson_times.py")
assert _spec and _spec.loader
lesson_times = importlib.util.module_from_spec(_spec)
sys.modules["lesson_times"] = lesson_times  # dataclasses look their module up there
_spec.loader.exec_module(lesson_times)

DEMO_TIMEOUT = 60  # seconds; the demo takes about two on a quiet machine


def _section(title: str) -> str:
    """The text under the ``## `` heading that starts with ``title``, up to the next one."""
    text = GUIDE.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"{GUIDE.name} has no section '## {title}'"
    return match.group(1)


# --------------------------------------------------------------------------- the live demo


@dataclass(frozen=True)
class Step:
    command: str
    expected: tuple[str, ...]  # the lines the guide shows under the command


def demo_steps() -> list[Step]:
    steps: list[Step] = []
    for block in re.findall(r"^```console\n(.*?)^```", _section("Live demo"), re.MULTILINE | re.DOTALL):
        lines = block.splitlines()
        assert lines and lines[0].startswith("$ "), f"a console block must start with a command: {block[:80]!r}"
        for line in lines:
            if line.startswith("$ "):
                steps.append(Step(line[2:], ()))
            else:
                steps[-1] = Step(steps[-1].command, (*steps[-1].expected, line))
    return steps


def _script(steps: list[Step], terminal: Path) -> str:
    """The commands, one a line; after a background command, a silent wait for the lines it shows."""
    lines, shown = [], 0
    for step in steps:
        lines.append(step.command)
        shown += len(step.expected)
        if step.command.rstrip().endswith("&"):
            lines.append(
                f'for ((_i = 0; _i < {DEMO_TIMEOUT * 20}; _i++)); do [ "$(wc -l < {shlex.quote(str(terminal))})" -ge {shown} ] && break;'
                " sleep 0.05; done"
            )
    return "\n".join(lines) + "\n"


def _environment() -> dict[str, str]:
    """child_env()'s PYTHONPATH, this interpreter first on PATH, and no LABKIT_* from a developer's shell.

    So the clock is pinned by the guide's own `export` line, or not at all.
    """
    env = {key: value for key, value in child_env().items() if not key.startswith("LABKIT_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("BASH_ENV", None)
    return env


def _start(folder: Path, steps: list[Step], env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    work, terminal, script = folder / "work", folder / "terminal.txt", folder / "demo.sh"
    work.mkdir(parents=True)
    script.write_text(_script(steps, terminal), encoding="utf-8")
    with terminal.open("wb") as out:  # a file, not a pipe: each `sleep 600` keeps its copy of stderr
        process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", str(script)], cwd=work, env=env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    return process, terminal


def _finish(process: subprocess.Popen, terminal: Path) -> tuple[str, str | None]:
    """What the terminal showed, and when the run of INC-1002 was stored as created."""
    try:
        process.wait(timeout=DEMO_TIMEOUT)
    finally:
        try:  # the demo's `sleep 600`s, and anything left if it timed out: all in bash's own group
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    db = terminal.parent / "work" / "demo.db"
    created = None
    if db.exists():
        with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT created_at FROM runs WHERE incident = 'INC-1002'").fetchone()
            created = row[0] if row else None
    return terminal.read_text(encoding="utf-8"), created


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory) -> dict[str, tuple[str, str | None]]:
    """What the demo printed: as the guide writes it, and with the clock line dropped and LABKIT_CLOCK unset."""
    if shutil.which("bash") is None:
        pytest.skip("the demo is a bash session and this machine has no bash")
    steps = demo_steps()
    unpinned = [step for step in steps if not step.command.startswith(f"export {CLOCK_ENV}=")]
    assert len(unpinned) == len(steps) - 1, f"the demo should start by pinning the clock: export {CLOCK_ENV}=..."
    started = {
        "pinned": _start(tmp_path_factory.mktemp("demo-pinned"), steps, _environment()),
        "wall clock": _start(tmp_path_factory.mktemp("demo-wall-clock"), unpinned, _environment()),
    }
    return {name: _finish(*run) for name, run in started.items()}


def first_difference(steps: list[Step], printed: str) -> str | None:
    """Where the printed lines first differ from the guide's, naming the command; None when they agree."""
    actual = printed.splitlines()
    position = 0
    for step in steps:
        for wanted in step.expected:
            got = actual[position] if position < len(actual) else "<nothing more>"
            if got != wanted:
                return f"line {position + 1}, after `$ {step.command}`: the guide shows {wanted!r}, the terminal printed {got!r}"
            position += 1
    if position < len(actual):
        return f"the terminal printed more than the guide shows: {actual[position:]!r}"
    return None


@pytest.mark.parametrize("clock", ["pinned", "wall clock"])
def test_the_demo_prints_what_the_guide_says(demo_output, clock):
    printed, _ = demo_output[clock]
    difference = first_difference(demo_steps(), printed)
    assert difference is None, f"{difference}\n--- the terminal printed:\n{printed}"


def test_the_demo_pins_the_clock_as_the_guide_says(demo_output):
    """Pinned, the rows' times are the guide's instant; without the export line, real times."""
    pinned = next(step.command for step in demo_steps() if step.command.startswith(f"export {CLOCK_ENV}="))
    instant = pinned.split("=", 1)[1]
    assert demo_output["pinned"][1] == instant
    assert demo_output["wall clock"][1] not in (None, instant)


def test_a_wrong_line_in_the_guide_is_caught(demo_output):
    """The comparison can fail: each kind of slip an editor could make is reported."""
    steps = demo_steps()
    where = next(i for i, step in enumerate(steps) if "not_inspected             0     1" in " ".join(step.expected))
    slips = {
        "a changed count": [line.replace("0     1", "0     2") for line in steps[where].expected],
        "a line left out": list(steps[where].expected[:-1]),
        "a line added": [*steps[where].expected, "INC-1002   evidence_recorded         0     1"],
    }
    for slip, expected in slips.items():
        edited = [*steps[:where], Step(steps[where].command, tuple(expected)), *steps[where + 1:]]
        assert first_difference(edited, demo_output["pinned"][0]) is not None, f"{slip} went unnoticed"


def test_the_demo_kills_recovers_and_shows_both_outcomes():
    """What the demo is for, so that it cannot be 'fixed' by cutting it down to what happens to pass."""
    steps = demo_steps()
    commands = [step.command for step in steps]
    shown = [line for step in steps for line in step.expected]
    assert sum("--pause-at after_read" in c and c.endswith("&") for c in commands) == 1
    assert sum("--pause-at after_evidence_commit" in c and c.endswith("&") for c in commands) == 1
    assert sum(c.startswith("kill -9 $!") for c in commands) == 2 and shown.count("exit 137") == 2
    assert sum(c.startswith("python -m labkit recover") for c in commands) == 2
    assert "INC-1002   not_inspected             0     1" in shown  # killed inside the read: one read, no receipt
    assert "INC-1005   evidence_recorded         0     1" in shown  # killed after the evidence commit
    final = [i for i, c in enumerate(commands) if c.startswith("python -m labkit status")][-1]
    assert steps[final].expected[1:] == (
        "INC-1002   report_completed          1     2",  # N1: the read happened again
        "INC-1005   report_completed          1     1",  # committed evidence: no second read
    )


# --------------------------------------------------------------------------- the plans


@dataclass(frozen=True)
class Row:
    starts: int  # minutes since the session began
    minutes: int | None  # None on the closing "end" row
    what: str
    teach: str

    @property
    def lesson(self) -> str | None:
        found = re.search(r"`(\d\d_\w+)`", self.what)
        return found.group(1) if found else None


def plan(title: str) -> list[Row]:
    rows = []
    for line in _section(title).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or not re.fullmatch(r"\d+:\d\d", cells[0]):
            continue  # prose, the header, the separator
        hours, minutes = map(int, cells[0].split(":"))
        rows.append(Row(60 * hours + minutes, int(cells[1]) if cells[1] else None, cells[2], cells[3]))
    assert rows, f"no plan table under '## {title}'"
    return rows


PLANS = {
    # title: (which minutes each lesson gets, how long the session lasts, the lessons it must hold)
    # 00 is done before the day and 06 is the stretch lesson: 00-06's core is more than three hours.
    "Three-hour plan": ("core", 180, [p.stem for p in FIRST_LESSONS if "01" <= p.name[:2] <= "05"]),
    "Full-day plan": ("all", None, [p.stem for p in FIRST_LESSONS]),
    "Second-day plan": ("all", None, [p.stem for p in NOTEBOOKS if p not in FIRST_LESSONS]),
    "Ninety-minute plan": ("core", 90, ["01_a_transcript_is_not_state", "02_three_states"]),
}


def _measured(stem: str, which: str) -> int:
    times = lesson_times.lesson_times(ROOT / "notebooks" / f"{stem}.ipynb")
    if which == "core":
        return times["reading_core"] + times["exercises_core"]
    return times["reading"] + times["exercises"]


@pytest.mark.parametrize("title", PLANS)
def test_each_plan_gives_each_lesson_its_measured_minutes(title):
    which, length, lessons = PLANS[title]
    rows = plan(title)
    for row in rows:
        if row.lesson is not None:
            assert row.minutes == _measured(row.lesson, which), (
                f"{title}: {row.lesson} takes {_measured(row.lesson, which)} min ({which}), the guide says {row.minutes}"
            )
    assert [row.lesson for row in rows if row.lesson] == lessons, f"{title} should hold, in order: {lessons}"


@pytest.mark.parametrize("title", PLANS)
def test_each_plan_starts_each_row_when_the_one_before_ends(title):
    _, length, _ = PLANS[title]
    rows = plan(title)
    clock = 0
    for row in rows:
        assert row.starts == clock, f"{title}: {row.what!r} should start at {clock // 60}:{clock % 60:02}"
        clock += row.minutes or 0
    assert rows[-1].minutes is None and rows[-1].what == "end", f"{title} should close with an 'end' row"
    if length is not None:
        assert rows[-1].starts == length, f"{title} lasts {rows[-1].starts} min, not {length}"


def _numbers(spec: str) -> list[str]:
    """'1–4' -> 1..4, '1, 3, 5' as written, '2.1–2.3' -> 2.1..2.3."""
    found = []
    for part in re.split(r",\s*", spec.strip()):
        if match := re.fullmatch(r"(\d+\.)?(\d+)\s*[–-]\s*(\d+\.)?(\d+)", part):
            prefix = match.group(1) or ""
            found += [f"{prefix}{n}" for n in range(int(match.group(2)), int(match.group(4)) + 1)]
        elif part:
            found.append(part)
    return found


def _taught(teach: str) -> tuple[list[str] | None, list[str]]:
    """('sections 1, 3, 5; Exercise 5.3') -> (['1', '3', '5'], ['5.3']); None for 'all sections'."""
    sections: list[str] | None = None
    exercises: list[str] = []
    for part in (p.strip() for p in teach.split(";")):
        if part.startswith("sections "):
            sections = _numbers(part.removeprefix("sections "))
        elif part.startswith("Exercise"):
            exercises = _numbers(re.sub(r"^Exercises?\s+", "", part))
        elif part != "all sections":
            raise AssertionError(f"cannot read {part!r} in {teach!r}")
    return sections, exercises


@pytest.mark.parametrize("title", PLANS)
def test_each_plan_names_the_sections_and_exercises_its_minutes_count(title):
    which = PLANS[title][0]
    for row in plan(title):
        if row.lesson is None:
            continue
        found = lesson_times.sections(ROOT / "notebooks" / f"{row.lesson}.ipynb")
        numbered = [s for s in found if re.match(r"\d+\. ", s.title)]
        if which == "core":
            sections = [s.title.split(".")[0] for s in numbered if not s.optional]
            exercises = [n for s in found if not s.optional for n, optional, _, _ in s.exercises if not optional]
        else:
            sections = None
            exercises = [n for s in found for n, _, _, _ in s.exercises]
        assert _taught(row.teach) == (sections, exercises), f"{title}: {row.lesson} should teach {sections}, {exercises}"


def test_each_plan_teaches_a_lesson_only_after_its_prerequisites():
    """A plan may leave a lesson for homework, but never teach one before a lesson it lists as a prerequisite.

    Every lesson's header names its prerequisites; a plan that skips one of them (the old
    ninety-minute plan taught 03 without 02) leaves the room without what the lesson uses.
    """
    for title in PLANS:
        taught = [row.lesson for row in plan(title) if row.lesson]
        for position, stem in enumerate(taught):
            first = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"][0]
            line = re.search(r"Prerequisites:([^\n]*)", "".join(first["source"]))
            needed = re.findall(r"\d\d_\w+", line.group(1)) if line else []
            before = set(taught[:position])
            if title != "Full-day plan":  # done before the day (three hours, ninety minutes) or on day one
                before |= {"00_setup_check"} | ({p.stem for p in FIRST_LESSONS} if title == "Second-day plan" else set())
            missing = [lesson for lesson in needed if lesson not in before]
            assert not missing, f"{title}: {stem} needs {missing}, which the plan has not taught before it"


def test_the_guide_states_the_core_total_of_the_first_lessons():
    total = sum(_measured(path.stem, "core") for path in FIRST_LESSONS)
    assert f"take {total} minutes this way" in " ".join(_section("Three-hour plan").split())


def test_every_notebook_has_its_objectives_in_the_guide():
    objectives = _section("Objectives per lesson")
    for path in NOTEBOOKS:
        assert f"### `{path.stem}`" in objectives, f"add {path.stem}'s objectives (from its header) to {GUIDE.name}"
    assert NOTEBOOKS, "no notebooks found"
