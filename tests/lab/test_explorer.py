"""The crash explorer: every point and every pair, the correct workflow holding, each known bug caught.

The expectations here are this file's own model of the workflow (which points a recovery
passes, how many reads each crash costs), written out by hand, so the explorer is compared
with something it did not compute itself.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import pytest

import labkit
from labkit.crashpoints import CRASH_POINTS, CrashPoint
from labkit.lab import explorer
from labkit.lab.naive import CRASH_BUGS
from labkit.lab.processes import child_env

RUN = ["before_read", "after_read", "before_evidence_commit", "after_evidence_commit", "before_receipt_write",
       "before_completion_commit", "after_completion_commit", "before_send", "after_send"]
WORK = ["after_lease", "before_read", "after_read", "before_evidence_commit", "after_evidence_commit", "before_receipt_write",
        "before_completion_commit", "after_completion_commit"]
READ_WINDOW = {"after_read", "before_evidence_commit"}


def passes_on_recovery(flow: str, first: str) -> set[str]:
    """The points a recovery (or the next leased worker) passes after a crash at ``first``."""
    if first in ("after_lease", "before_read", "after_read", "before_evidence_commit"):
        start = "after_lease" if flow == "work" else "before_read"   # the run is still at not_inspected
    elif first in ("after_evidence_commit", "before_receipt_write", "before_completion_commit"):
        start = "after_lease" if flow == "work" else "before_receipt_write"  # at evidence_recorded
    elif first in ("after_completion_commit", "before_send") and flow == "run":
        start = "before_send"          # completed, its ticket still owed: the intent says never sent
    else:
        return set()                   # after_send: found at the destination by key; leased and completed: nothing to do
    points = WORK if flow == "work" else RUN
    passed = set(points[points.index(start):])
    if flow == "work" and start == "after_lease" and first not in ("after_lease", "before_read", "after_read", "before_evidence_commit"):
        passed -= {"before_read", "after_read", "before_evidence_commit", "after_evidence_commit"}
    return passed


def expected_reads(flow: str, points: tuple[str, ...], reached: tuple[bool, ...]) -> int:
    return 1 + sum(point in READ_WINDOW and hit for point, hit in zip(points, reached, strict=True))


# =========================================================================== coverage


def test_every_crash_point_the_code_defines_is_explored_alone_and_in_every_pair():
    assert set(RUN) | set(WORK) == set(CRASH_POINTS), "this file's model is missing a point: add it above"
    chosen = explorer.scenarios()
    by_flow = {"run": RUN, "work": WORK}
    for flow, points in by_flow.items():
        mine = [s.crash_points for s in chosen if s.flow == flow]
        assert mine == [(p,) for p in points] + list(product(points, points))
    assert len(chosen) == 9 + 81 + 8 + 64
    assert {p for s in chosen for p in s.crash_points} == set(CRASH_POINTS)


def test_a_point_that_no_flow_reaches_stops_the_explorer_instead_of_going_unexplored(monkeypatch):
    monkeypatch.setattr(explorer, "CRASH_POINTS", (*CRASH_POINTS, "after_something_new"))
    with pytest.raises(RuntimeError, match="after_something_new"):
        explorer.scenarios()


def test_a_point_added_to_a_flow_is_explored_without_editing_the_explorer(monkeypatch):
    monkeypatch.setattr(explorer, "points", lambda tickets: (*labkit.crashpoints.points(tickets=tickets), "after_new_step"))
    run_points = {s.crash_points for s in explorer.scenarios() if s.flow == "run"}
    assert ("after_new_step",) in run_points and ("after_new_step", "before_read") in run_points


# =========================================================================== the correct workflow


@pytest.fixture(scope="module")
def exploration(tmp_path_factory):
    return explorer.explore(tmp_path_factory.mktemp("explore") / "all")


def test_every_invariant_holds_in_every_scenario_of_the_correct_workflow(exploration):
    assert len(exploration.results) == 162
    broken = {r.name: r.broken for r in exploration.results if r.broken}
    assert broken == {}
    assert exploration.held
    for result in exploration.results:
        applies = explorer.FLOW_INVARIANTS[result.scenario.flow]
        assert [n for n, held in result.invariants.items() if held] == list(applies), result.name
        assert [n for n, held in result.invariants.items() if held is None] == [n for n in range(1, 12) if n not in applies]


def test_each_scenario_killed_where_the_model_says_and_cost_the_reads_it_predicts(exploration):
    for result in exploration.results:
        flow, points = result.scenario.flow, result.scenario.crash_points
        assert result.ends[0].killed, f"{result.name}: the run was not killed at its first point"
        if len(points) == 2:
            assert result.reached[1] == (points[1] in passes_on_recovery(flow, points[0])), result.name
        assert result.provider_reads == expected_reads(flow, points, result.reached), result.name
        assert result.receipts == 1
        assert result.tickets == (1 if flow == "run" else None)


def test_the_table_has_a_row_per_scenario_and_a_column_per_invariant(exploration):
    frame = exploration.frame()
    assert len(frame) == 162
    assert [str(n) for n in range(1, 12)] == [c for c in frame.columns if c.isdigit()]
    assert {"scenario", "provider_reads", "receipts", "tickets"} <= set(frame.columns)
    assert frame.loc[frame.scenario == "after_read", "provider_reads"].item() == 2
    assert frame.loc[frame.scenario == "leased after_lease", "8"].item() is None
    text = exploration.text()
    assert "162 scenarios, 0 with a broken invariant" in text and "✗" not in text


def test_no_child_process_or_service_is_left_behind(tmp_path):
    # This process may already have children of its own (the suite's warm server for labkit
    # children, tests/warm_children.py): the explorer must add none, running or a zombie.
    before = _children_of_this_process()
    explorer.explore(tmp_path / "x", pairs=False, workers=2)
    assert _children_of_this_process() == before


def _children_of_this_process() -> set[int]:
    """Every process whose parent is this one, zombies included (Linux's /proc)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs Linux's /proc to list a process's children")
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():  # the field after the state: the parent's pid
                found.add(int(entry.name))
    return found


def test_a_child_is_really_killed_by_sigkill_and_its_error_comes_back():
    assert explorer.in_child(lambda: os.kill(os.getpid(), signal.SIGKILL)).killed
    failed = explorer.in_child(lambda: labkit.CrashPlan("after_read", "raise").reached(CrashPoint.AFTER_READ))
    assert (failed.killed, failed.code) == (False, 1) and "InjectedFailure" in failed.error
    assert explorer.in_child(lambda: None) == explorer.ChildEnd(killed=False, code=0)


# =========================================================================== known bugs


#: Where each known bug shows first, and which invariant turns red there.
CAUGHT_AT = {
    "evidence_and_step_apart": ("after_evidence_commit", {1, 2, 5, 7}),
    "no_receipt_key": ("before_completion_commit", {1, 7}),
    "reread_committed_evidence": ("after_evidence_commit", {5}),
    "retry_without_key": ("after_send", {8, 9}),
}


@pytest.mark.parametrize("bug", CRASH_BUGS)
def test_each_known_bug_turns_a_cell_of_the_table_red(bug, tmp_path):
    found = explorer.explore(tmp_path / bug, pairs=False, bug=bug)
    assert not found.held
    point, invariants = CAUGHT_AT[bug]
    [row] = [r for r in found.results if r.scenario.crash_points == (point,)]
    assert set(row.broken) == invariants, row.broken
    assert all(r.scenario.bug == bug for r in found.results)


def test_a_bug_turns_its_heat_map_cells_red(tmp_path):
    """The heat map's numbers (12's compared tables) count held over judged: a broken scenario shows."""
    found = explorer.explore(tmp_path / "bug", pairs=False, bug="reread_committed_evidence")
    assert found.by_flow().loc["run (9 scenarios)", "5"] == "3/9"
    assert list(found.summary()["5"]) == ["1/1"] * 3 + ["0/1"] * 6
    assert set(found.summary()["1"]) == {"1/1"} and set(found.summary()["10"]) == {"·"}
    assert list(found.collapsed()["invariants"]) == ["all held", "all held", "broken: 5"]  # 1 read, 2 reads, then red


def test_the_bugs_the_explorer_knows_are_the_ones_a_crash_can_reveal():
    assert set(CAUGHT_AT) == set(CRASH_BUGS)
    assert set(CRASH_BUGS) < set(labkit.lab.naive.BUGS)
    with pytest.raises(explorer.BadExploreOption, match="race"):
        explorer.explore("unused", bug="check_then_act_completion")


# =========================================================================== random kills


def test_random_kills_keep_every_invariant(tmp_path):
    kills = explorer.random_kills(tmp_path / "r", 16, seed=12)
    assert kills.trials == len(kills.results) == 16
    assert kills.violations == []
    assert sum(kills.landed().values()) == 16


def test_random_kills_land_inside_the_run_every_time(tmp_path):
    """Each first kill stops the run after its run row committed and before it ended (12's where-each-landed table)."""
    kills = explorer.random_kills(tmp_path / "r", 8, seed=12)
    assert all(trial.killed[0] for trial in kills.results), kills.landed()
    assert "no run" not in kills.landed() and "finished before the kill" not in kills.landed()
    assert all(kills.run_row_at < trial.run_at < kills.steps for trial in kills.results)


@pytest.mark.skipif(not os.environ.get("LABKIT_SOAK"), reason="the long soak: make soak (LABKIT_SOAK=1) runs 240 trials")
def test_random_kills_soak(tmp_path):
    trials = int(os.environ.get("LABKIT_RANDOM_TRIALS", "240"))
    kills = explorer.random_kills(tmp_path / "soak", trials, seed=20261201)
    print(f"\nrandom kills: {trials} trials in {kills.seconds:.1f} s, landed {kills.landed()}, "
          f"{len(kills.violations)} violations")
    assert [(t.number, t.run_at, t.recovery_at, t.broken) for t in kills.violations] == []


def test_random_kills_by_clock_kill_from_outside_and_keep_every_invariant(tmp_path):
    """The soak's other half: SIGKILL after a random delay, which may land inside a file write or a read."""
    kills = explorer.random_kills(tmp_path / "clock", 6, seed=3, by_clock=True)
    assert kills.unit == "ms" and kills.as_json()["unit"] == "ms"
    assert all(0 < trial.run_at <= kills.steps + 1 for trial in kills.results)  # aimed inside a clean run's span
    assert kills.violations == []
    assert sum(kills.landed().values()) == 6


@pytest.mark.skipif(not os.environ.get("LABKIT_SOAK"), reason="the long soak: make soak (LABKIT_SOAK=1) runs 120 trials")
def test_random_kills_by_clock_soak(tmp_path):
    trials = int(os.environ.get("LABKIT_RANDOM_TRIALS", "240")) // 2
    kills = explorer.random_kills(tmp_path / "soak", trials, seed=20261206, by_clock=True)
    print(f"\nrandom kills by clock: {trials} trials in {kills.seconds:.1f} s, landed {kills.landed()}, "
          f"{len(kills.violations)} violations")
    assert [(t.number, t.run_at, t.recovery_at, t.broken) for t in kills.violations] == []


def test_random_kills_catch_a_known_bug_and_name_the_seed_and_delays(tmp_path):
    kills = explorer.random_kills(tmp_path / "r", 6, seed=5, bug="retry_without_key")
    assert kills.violations, "every ticket this variant opens sits under another key than its effect's"
    shown = kills.as_json()["violations"][0]
    assert shown["seed"] == 5 and {"trial", "run_kill_at", "recovery_kill_at", "broken"} <= set(shown)


def test_the_same_seed_draws_the_same_moments_and_lands_the_same(tmp_path):
    first = explorer.random_kills(tmp_path / "a", 3, seed=7, workers=1)
    second = explorer.random_kills(tmp_path / "b", 3, seed=7, workers=1)
    assert first.steps == second.steps  # SQLite's work, counted: no machine speed in it
    assert [(t.run_at, t.recovery_at, t.step_after_kill, t.killed) for t in first.results] == [
        (t.run_at, t.recovery_at, t.step_after_kill, t.killed) for t in second.results]


# =========================================================================== the command line


def test_explore_json_has_the_shape_design_promises(cli, tmp_path):
    done = cli("explore", "--db-dir", tmp_path / "x", "--singles", "--random", "3", "--seed", "9", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert len(found["scenarios"]) == 17
    first = found["scenarios"][0]
    assert {"name", "crash_points", "invariants", "provider_reads", "receipts"} <= set(first)
    assert first["invariants"]["1"] is True and first["invariants"]["10"] is None
    assert found["random"]["trials"] == 3 and found["random"]["seed"] == 9 and found["random"]["violations"] == []


def test_explore_exits_1_when_a_bug_breaks_an_invariant(cli, tmp_path):
    done = cli("explore", "--db-dir", tmp_path / "x", "--singles", "--bug", "reread_committed_evidence")
    assert done.returncode == 1
    assert "after_evidence_commit: 5 provider reads = 1 + reads never committed: INC-1003 read 2 times, expected 1" in done.stdout


def test_explore_refuses_bad_input_in_one_line_and_makes_nothing(cli_main, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = {
        ("--db-dir", full): "not empty",
        ("--db-dir", a_file): "not a folder",
        ("--db-dir", link): "symlink",
        ("--db-dir", fifo): "not a folder",
        ("--db-dir", tmp_path / "n", "--random", "-1"): "--random",
        ("--db-dir", tmp_path / "n", "--workers", "0"): "--workers",
        ("--db-dir", tmp_path / "n", "--seed", "3"): "--random N",
        ("--db-dir", tmp_path / "n", "--bug", "nope"): "unknown bug",
        ("--db-dir", tmp_path / "n", "--bug", "check_then_act_completion"): "race",
    }
    for args, message in cases.items():
        done = cli_main("explore", *args)
        assert done.returncode == 2, (args, done.stdout)
        assert len(done.stderr.splitlines()) == 1 and message in done.stderr, (args, done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "fifo", "full", "link"]
    assert [p.name for p in full.iterdir()] == ["keep.txt"] and a_file.read_text() == "x"


def test_the_recovery_scorecard_reads_the_explorers_table(exploration, tmp_path):
    """The evaluation layer's recovery score, fed by the explorer (13_evaluation): the table's counts, summed."""
    score = labkit.evaluation.recovery_from_scenarios(exploration.frame().to_dict("records"))
    assert (score.runs, score.completed, score.duplicate_receipts, score.duplicate_effects) == (162, 162, 0, 0)
    assert score.rereads == sum(r.provider_reads - 1 for r in exploration.results) == 52
    naive = explorer.explore(tmp_path / "naive", pairs=False, bug="retry_without_key")
    assert labkit.evaluation.recovery_from_scenarios(naive.frame().to_dict("records")).duplicate_effects == 1  # the kill after the send


def test_explore_json_shows_the_random_object_the_contract_promises_even_without_random_kills(cli, tmp_path):
    done = cli("explore", "--db-dir", tmp_path / "x", "--singles", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["random"] == {"trials": 0, "seed": 0, "steps": 0, "unit": "steps", "landed": {}, "violations": [], "seconds": 0.0}


# =========================================================================== the folder it works in


@dataclass(frozen=True)
class _Planted:
    """What ``pickle.loads`` runs if it ever reads this object back: it makes the folder ``ran``."""

    ran: str

    def __reduce__(self):
        return (os.mkdir, (self.ran,))


def test_files_planted_where_workers_once_left_results_run_nothing_and_change_nothing(tmp_path):
    """Someone who can write to --db-dir plants, over and over while the exploration runs, a pickle
    and a symlink where a worker once left its results (.worker-N.pickle): nothing planted runs,
    the file the link points at is untouched, and the table is the right one."""
    folder, ran, outside = tmp_path / "x", tmp_path / "planted-code-ran", tmp_path / "outside.txt"
    outside.write_text("not the explorer's")
    bait = pickle.dumps(_Planted(str(ran)))
    out = tmp_path / "stdout.json"
    with out.open("w") as stdout:
        explore = subprocess.Popen([sys.executable, "-m", "labkit", "explore", "--db-dir", str(folder), "--singles",
                                    "--workers", "2", "--json"], stdout=stdout, stderr=subprocess.PIPE, text=True,
                                   env=child_env())
        planted = 0
        while explore.poll() is None:
            with suppress(OSError):  # the folder does not exist yet
                link = folder / ".worker-1.pickle"
                if not link.is_symlink():
                    link.symlink_to(outside)
                (folder / ".planting").write_bytes(bait)
                os.replace(folder / ".planting", folder / ".worker-0.pickle")  # whole, never half-written
                planted += 1
            time.sleep(0.0005)
        stderr = explore.stderr.read()
    assert planted > 100, "the planting never started: the test proves nothing"
    assert (ran.exists(), outside.read_bytes()) == (False, b"not the explorer's"), "planted code ran, or a link was followed"
    assert explore.returncode == 0, stderr
    found = json.loads(out.read_text())
    assert len(found["scenarios"]) == 17 and found["held"]
    assert all(row["broken"] == {} and row["receipts"] == 1 for row in found["scenarios"])


def test_a_folder_that_every_user_can_write_to_is_refused_sticky_or_not(cli_main, refused, tmp_path):
    for mode in (0o777, 0o1777):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        refused(cli_main("explore", "--db-dir", shared, "--singles"), str(shared), "every user")
        assert list(shared.iterdir()) == []


def test_a_folder_inside_one_every_user_can_write_to_without_the_sticky_bit_is_refused(cli_main, refused, tmp_path):
    """There another user can rename the folder away mid-exploration and put their own, or a
    symlink to anywhere, in its place. Under a sticky folder (as /tmp is) they cannot."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(shared)
    for given in (shared / "new", mine, shared / "a" / "b"):
        refused(cli_main("explore", "--db-dir", given, "--singles"), f"inside {shared},", "sticky")
    refused(cli_main("explore", "--db-dir", link / "new", "--singles"), f"inside {link},", "sticky")  # through a symlink
    assert sorted(p.name for p in shared.iterdir()) == ["mine"] and list(mine.iterdir()) == []
    shared.chmod(0o1777)
    assert explorer._fresh_folder(shared / "new") == shared / "new"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_another_users_folder_is_refused(cli_main, refused, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    refused(cli_main("explore", "--db-dir", theirs, "--singles"), "another user")
    assert list(theirs.iterdir()) == []


def test_a_folder_the_explorer_makes_is_private(tmp_path):
    made = explorer._fresh_folder(tmp_path / "new" / "x")
    assert made.stat().st_mode & 0o777 == 0o700


def test_a_worker_that_fails_or_dies_is_an_error_not_a_short_table():
    """A run-time failure of labkit's own (the command prints one line, exit 1), not a RuntimeError
    that `python -m labkit explore` would show as a traceback, as it did before."""
    def boom():
        raise ValueError("boom")

    with pytest.raises(labkit.errors.RunFailure, match="an explorer worker stopped: ValueError: boom"):
        explorer.in_parallel([lambda: explorer.ChildEnd(False, 0), boom], lambda data: data, workers=2)
    with pytest.raises(labkit.errors.RunFailure, match=r"explorer worker 1 ended \(killed\) after 0 of 1 results"):
        explorer.in_parallel([lambda: explorer.ChildEnd(False, 0), lambda: os.kill(os.getpid(), signal.SIGKILL)],
                             lambda data: data, workers=2)
