"""How labkit's commands grow with the number of runs: each timed at two sizes, with the growth exponent.

    python scripts/bench.py --scale 1000 10000

For each size N this makes a data folder of N incidents (copies of the shipped ones under the
ids ``INC-0000`` .. ``INC-{N-1}``, with a ground truth for each, as ``LABKIT_DATA_DIR``), seeds a
database with N runs at ``not_inspected`` through labkit's own :func:`labkit.store.create_run_txn`
(one transaction: no SQL written here that could drift from labkit's), and times the real
commands, each a ``python -m labkit`` child as a user runs it:

- ``recover``: drives every run to ``report_completed`` (N provider reads, N receipts);
- ``status --json``, ``evaluate``: read the N completed runs (and the call log of N reads);
- ``retain --older-than 0``: removes every finished run's raw diagnostic, then VACUUMs;
- ``work --workers 4``: on a second database seeded the same way, four leased workers finish them.

The growth exponent is ``log(t2/t1) / log(N2/N1)``: 1 is linear, 2 quadratic. Each child's
start-up (about 0.08 s of imports) is in both timings, which pulls the exponent of a fast
command below 1; the exponent of the time less one ``python -m labkit incidents`` child is
shown as well, where the smaller timing is more than twice that start-up.
Speed is measured here and never asserted in a test; what is checked is that every command
did its work (every run completed, every diagnostic removed).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..clock import SystemClock
from ..coordinator import WORKFLOW_VERSION
from ..database import transaction
from ..provider import DATA_ENV, data_dir, incident_file, list_incidents
from ..store import connect, create_run_txn
from .processes import labkit_cli

#: The sizes ``make bench`` times by default (SCALE_RUNS overrides them).
DEFAULT_SIZES = (1000, 10000)
#: The incident ids the evidence contract accepts are ``INC-`` and four digits.
MAX_RUNS = 10000
COMMANDS = ("recover", "status --json", "evaluate", "retain --older-than 0", "work --workers 4")
#: A child may take this long at the largest size before it is given up on.
TIMEOUT_S = 1800


@dataclass(frozen=True)
class Timing:
    command: str
    runs: int
    seconds: float


def scale_id(number: int) -> str:
    return f"INC-{number:04d}"


def make_data(folder: Path, runs: int) -> Path:
    """A data folder with ``runs`` incidents copied from the shipped ones, and a ground truth row for each."""
    if not 1 <= runs <= MAX_RUNS:
        raise ValueError(f"a scale size is a number of runs from 1 to {MAX_RUNS}, not {runs}")
    shipped = data_dir()
    sources = list_incidents(shipped)
    truth = {}
    with (shipped / "ground_truth.csv").open(encoding="utf-8", newline="") as handle:
        import csv

        for row in csv.DictReader(handle):
            truth[row["incident"]] = row
    (folder / "incidents").mkdir(parents=True)
    lines = ["incident,kind,explanation"]
    for number in range(runs):
        source = sources[number % len(sources)]
        snapshot = json.loads(incident_file(shipped, source).read_text(encoding="utf-8"))
        snapshot["incident"] = scale_id(number)
        incident_file(folder, scale_id(number)).write_text(json.dumps(snapshot, indent=2), encoding="utf-8")
        lines.append(f"{scale_id(number)},{truth[source]['kind']},copied from {source}")
    (folder / "ground_truth.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def seed_runs(db: Path, runs: int) -> None:
    """``runs`` runs at ``not_inspected``, created by labkit's own store function in one transaction."""
    clock = SystemClock()
    with closing(connect(db)) as conn, transaction(conn):
        for number in range(runs):
            create_run_txn(conn, scale_id(number), WORKFLOW_VERSION, clock)


def _timed(env: dict[str, str], *args: str | Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = labkit_cli(*args, env=env, timeout=TIMEOUT_S)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args[:1]))} failed at scale: {done.stderr.strip()[-300:]}")
    return seconds, done.stdout


def _all_completed(env: dict[str, str], db: Path, runs: int, command: str) -> None:
    _, out = _timed(env, "status", "--db", db, "--json")
    steps = [run["step"] for run in json.loads(out)["runs"]]
    if len(steps) != runs or set(steps) != {"report_completed"}:
        raise RuntimeError(f"{command} left runs unfinished at {runs} runs: {len(steps)} runs, steps {sorted(set(steps))}")


def time_commands(folder: Path, runs: int) -> Iterator[Timing]:
    """Every command of :data:`COMMANDS` at ``runs`` runs, each checked for having done its work, as it is timed."""
    data = make_data(folder / "data", runs)
    env = {DATA_ENV: str(data)}
    db, pool_db = folder / "runs.db", folder / "pool.db"
    seed_runs(db, runs)
    seed_runs(pool_db, runs)
    seconds, _ = _timed(env, "recover", "--db", db)
    yield Timing("recover", runs, seconds)
    seconds, out = _timed(env, "status", "--db", db, "--json")
    yield Timing("status --json", runs, seconds)
    _all_completed(env, db, runs, "recover")
    seconds, out = _timed(env, "evaluate", "--db", db, "--json")
    scored = json.loads(out)
    if scored["task"]["scored"] != runs or scored["recovery"]["completed"] != runs:
        raise RuntimeError(f"evaluate did not score the {runs} runs: {out[:200]}")
    yield Timing("evaluate", runs, seconds)
    seconds, out = _timed(env, "retain", "--db", db, "--older-than", "0")
    yield Timing("retain --older-than 0", runs, seconds)
    if f": removed {runs} raw diagnostic" not in out:
        raise RuntimeError(f"retain did not remove the {runs} raw diagnostics: {out.strip()[:300]}")
    seconds, _ = _timed(env, "work", "--db", pool_db, "--workers", "4")
    yield Timing("work --workers 4", runs, seconds)
    _all_completed(env, pool_db, runs, "work")


def startup_seconds() -> float:
    """A ``python -m labkit`` child that does nothing but list the incidents (the median of three): in every timing."""
    return sorted(_timed({}, "incidents")[0] for _ in range(3))[1]


def measure(sizes: tuple[int, ...], scratch: Path, progress: Callable[[Timing], None] | None = None) -> tuple[list[Timing], float]:
    """Every command at every size (``progress`` is told each timing as it is made), and the child start-up."""
    timings = []
    for runs in sizes:
        folder = scratch / f"scale-{runs}"
        folder.mkdir()
        try:
            for timing in time_commands(folder, runs):
                timings.append(timing)
                if progress is not None:
                    progress(timing)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return timings, startup_seconds()


def growth_exponent(small: Timing, large: Timing) -> float:
    """log(t2/t1) / log(N2/N1): how the time grows with the number of runs (1: linearly)."""
    return math.log(large.seconds / small.seconds) / math.log(large.runs / small.runs)


def scale_table(timings: list[Timing], startup: float) -> str:
    sizes = sorted({t.runs for t in timings})
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [f"scale: each command a `python -m labkit` child; child start-up {startup:.2f} s; load average {load}",
             f"{'command':<24}" + "".join(f"{f'{n:,} runs':>14}" for n in sizes)
             + (f"{'exponent':>10}{'less start-up':>15}" if len(sizes) > 1 else "")]
    for command in COMMANDS:
        row = {t.runs: t for t in timings if t.command == command}
        line = f"{command:<24}" + "".join(f"{row[n].seconds:>12.2f} s" for n in sizes)
        if len(sizes) > 1:
            first, last = row[sizes[0]], row[sizes[-1]]
            line += f"{growth_exponent(first, last):>10.2f}"
            # Only where both times are mostly work: less than twice the start-up is mostly start-up, and the
            # difference mostly noise (on a busy machine the larger size can even take less than one start-up).
            if min(first.seconds, last.seconds) > 2 * startup:
                less = [Timing(t.command, t.runs, t.seconds - startup) for t in (first, last)]
                line += f"{growth_exponent(*less):>15.2f}"
            else:
                line += f"{'-':>15}"
        lines.append(line)
    return "\n".join(lines)
