"""Break labkit on purpose, one small bug at a time, and see whether the lessons notice.

A lesson teaches a claim ("recover refuses runs of another workflow version before it
starts"); a learner trusts it because a cell shows it. If labkit were broken in exactly the
way the claim rules out, would any compared cell change? This script answers that for every
bug listed in ``scripts/mutants/lessonNN.py``: each bug is applied to a fresh copy of the
repository, that lesson's notebook is run under strict nbval in the copy, and so are the unit
tests the bug names. A bug is *caught* when nbval fails; the unit tests are reported beside.

    python scripts/break_labkit.py                    # every bug of every lesson
    python scripts/break_labkit.py --lesson 08 09     # the bugs of two lessons
    python scripts/break_labkit.py --issue26 --repeat 2
    python scripts/break_labkit.py --only recover-meets-old-versions-one-by-one

Each bug file holds ``MUTANTS``, a list of dicts:

- ``name``: a short id; ``claim``: the lesson's claim the bug breaks, in the lesson's words;
- ``path``, ``old``, ``new``: the file and the exact text replaced (``old`` must occur once);
- ``unit_tests``: pytest node ids that should fail with the bug in place;
- ``issue26``: one of the eight bugs issue 26 found passing strict nbval (optional);
- ``equivalent``: why the change is not a bug a learner could see (optional; such a bug is
  run and reported, but surviving it is not a failure).

The copy imports its own labkit: ``PYTHONPATH`` puts it before the editable install, for the
notebook's kernel and for every child process a lesson starts. Before the bugs, each lesson
is run once unbroken in a copy (``--no-baseline`` skips it): a lesson that fails without a
bug would make every bug look caught. Exit status 1 if any bug not marked equivalent survives
nbval, or its unit tests; the table is also written to ``build/mutants.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUGS = ROOT / "scripts" / "mutants"
REQUIRED = ("name", "claim", "path", "old", "new", "unit_tests")


def load_mutants(lessons: list[str] | None = None) -> list[dict]:
    """Every bug of the given lessons (all when None), each with its ``lesson`` added, checked for shape."""
    mutants = []
    for path in sorted(BUGS.glob("lesson*.py")):
        lesson = path.stem.removeprefix("lesson")
        if lessons and lesson not in lessons:
            continue
        spec = importlib.util.spec_from_file_location(f"mutants_{lesson}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for mutant in module.MUTANTS:
            missing = [key for key in REQUIRED if key not in mutant]
            if missing:
                raise SystemExit(f"{path.name}: bug {mutant.get('name', '?')!r} lacks {', '.join(missing)}")
            mutants.append({**mutant, "lesson": lesson})
    names = [mutant["name"] for mutant in mutants]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise SystemExit(f"two bugs share the name {duplicated[0]!r}")
    return mutants


def apply(mutant: dict, root: Path) -> None:
    """Replace the bug's ``old`` text by its ``new`` text in ``root``; refuse when ``old`` is not there exactly once."""
    target = root / mutant["path"]
    text = target.read_text(encoding="utf-8")
    found = text.count(mutant["old"])
    if found != 1:
        raise SystemExit(f"bug {mutant['name']!r}: its old text occurs {found} times in {mutant['path']}, not once")
    target.write_text(text.replace(mutant["old"], mutant["new"]), encoding="utf-8")


def copy_repository(into: Path) -> Path:
    """The repository's tracked and new (not ignored) files, copied into ``into/lab``."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    target = into / "lab"
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def environment(copy: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def imports_its_own_labkit(copy: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import labkit; print(labkit.__file__)"], env=environment(copy),
                           cwd=copy, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"the copy imports labkit from {where}, not from itself: the bugs would not be seen")


#: Plugins a run loads only where its tests use them. Each pytest process the script starts (two a bug,
#: 136 in all) pays for every plugin at start: hypothesis's about 1.5 s, nbval's (nbformat, jsonschema)
#: about 0.3 s (2.5 s before requirements.txt held jsonschema at 4.24), where a bug's unit tests take
#: one or two seconds.
LESSON_RUN = ("-p", "no:hypothesispytest")  # the lessons' cells run in a kernel, which has no use for it


def _addopts_without_nbval() -> str:
    """pyproject.toml's addopts less nbval's options, which pytest refuses once nbval's plugin is left out."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        addopts = tomllib.load(handle)["tool"]["pytest"]["ini_options"]["addopts"]
    return " ".join(option for option in addopts.split() if not option.startswith("--nbval"))


UNIT_RUN = ("-o", f"addopts={_addopts_without_nbval()}", "-p", "no:nbval")


def unit_run(tests: list[str], copy: Path) -> list[str]:
    """pytest's arguments for a bug's unit tests: no nbval, and hypothesis only if one of their files imports it."""
    files = {(copy / test.split("::")[0]) for test in tests}
    uses_hypothesis = any("hypothesis" in path.read_text(encoding="utf-8") for path in files if path.is_file())
    return [*tests, *UNIT_RUN, *(() if uses_hypothesis else ("-p", "no:hypothesispytest"))]


def run_pytest(copy: Path, targets: list[str], timeout: float) -> tuple[bool, float, str]:
    """(passed, seconds, last lines) of pytest over ``targets`` (tests, and options) in the copy, in one process."""
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", *targets, "-n", "0", "-q", "-x", "-p", "no:randomly"],
                              cwd=copy, env=environment(copy), capture_output=True, text=True, timeout=timeout)
        passed, output = done.returncode == 0, done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        passed, output = False, f"timed out after {timeout:.0f} s"
    tail = " | ".join(line for line in output.strip().splitlines()[-3:])
    return passed, time.monotonic() - started, tail[-300:]


def notebook_of(lesson: str) -> str:
    found = sorted((ROOT / "notebooks").glob(f"{lesson}_*.ipynb"))
    if len(found) != 1:
        raise SystemExit(f"lesson {lesson}: {len(found)} notebooks match notebooks/{lesson}_*.ipynb")
    return f"notebooks/{found[0].name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", nargs="*", help="lesson numbers (07 08 ...); default every lesson with bugs")
    parser.add_argument("--only", nargs="*", help="bug names")
    parser.add_argument("--issue26", action="store_true", help="only the eight bugs issue 26 named")
    parser.add_argument("--repeat", type=int, default=1, help="run each bug this many times (a catch must hold every time)")
    parser.add_argument("--no-unit", action="store_true", help="skip the unit tests each bug names")
    parser.add_argument("--no-baseline", action="store_true", help="skip running each lesson unbroken first")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for one pytest run")
    parser.add_argument("--jobs", type=int, default=1, help="bugs run at once, each in its own copy (one per core)")
    args = parser.parse_args(argv)

    mutants = load_mutants(args.lesson)
    if args.only:
        unknown = sorted(set(args.only) - {mutant["name"] for mutant in mutants})
        if unknown:
            raise SystemExit(f"no bug named {unknown[0]!r}")
        mutants = [mutant for mutant in mutants if mutant["name"] in args.only]
    if args.issue26:
        mutants = [mutant for mutant in mutants if mutant.get("issue26")]
    if not mutants:
        raise SystemExit("no bugs selected")

    results, failures = [], 0
    with tempfile.TemporaryDirectory(prefix="break-labkit-") as scratch:
        clean = copy_repository(Path(scratch))
        imports_its_own_labkit(clean)
        if not args.no_baseline:
            # The unbroken lessons run as many at a time as the bugs do: each in the one clean copy, which
            # nothing writes to (a lesson's databases live in its own temporary folder).
            lessons = sorted({mutant["lesson"] for mutant in mutants})
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                runs = pool.map(lambda lesson: run_pytest(clean, [notebook_of(lesson), *LESSON_RUN], args.timeout), lessons)
                unbroken = list(zip(lessons, runs, strict=True))
            for lesson, (passed, seconds, _tail) in unbroken:
                print(f"lesson {lesson} unbroken: {'passes' if passed else 'FAILS'} ({seconds:.0f} s)", flush=True)
            failing = [(lesson, tail) for lesson, (passed, _, tail) in unbroken if not passed]
            for lesson, tail in failing:
                print(f"  lesson {lesson}: {tail}")
            if failing:
                return 1
        def run_one(mutant: dict, attempt: int) -> dict:
            work = Path(scratch) / f"{mutant['name']}-{attempt}"
            shutil.copytree(clean, work / "lab")
            copy = work / "lab"
            apply(mutant, copy)
            nb_passed, nb_seconds, _ = run_pytest(copy, [notebook_of(mutant["lesson"]), *LESSON_RUN], args.timeout)
            unit = None
            if mutant["unit_tests"] and not args.no_unit:
                unit_passed, _, _ = run_pytest(copy, unit_run(list(mutant["unit_tests"]), copy), args.timeout)
                unit = not unit_passed
            shutil.rmtree(work, ignore_errors=True)
            return {"lesson": mutant["lesson"], "name": mutant["name"], "attempt": attempt, "nbval_caught": not nb_passed,
                    "unit_caught": unit, "seconds": round(nb_seconds, 1), "equivalent": mutant.get("equivalent", ""),
                    "issue26": bool(mutant.get("issue26"))}

        work_list = [(mutant, attempt) for mutant in mutants for attempt in range(1, args.repeat + 1)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for row in pool.map(lambda item: run_one(*item), work_list):
                results.append(row)
                missed = (not row["nbval_caught"] or row["unit_caught"] is False) and not row["equivalent"]
                failures += missed
                mark = "equivalent" if row["equivalent"] else ("MISSED" if missed else "caught")
                unit_text = "-" if row["unit_caught"] is None else ("caught" if row["unit_caught"] else "MISSED")
                print(f"{row['lesson']}  {row['name']:<48} nbval {'caught' if row['nbval_caught'] else 'MISSED':<6}  "
                      f"unit {unit_text:<6}  {row['seconds']:5.0f} s  {mark}", flush=True)
    (ROOT / "build").mkdir(exist_ok=True)
    (ROOT / "build" / "mutants.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    by_lesson: dict[str, list[int]] = {}
    for row in results:
        counts = by_lesson.setdefault(row["lesson"], [0, 0])
        counts[0] += row["nbval_caught"]
        counts[1] += 1
    print("nbval caught, by lesson: " + ", ".join(f"{lesson} {c}/{n}" for lesson, (c, n) in sorted(by_lesson.items())))
    print(f"{failures} missed" if failures else "every bug caught")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
