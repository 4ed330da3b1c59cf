"""The bugs of scripts/mutants/ still apply to labkit as it is, and the harness refuses a stale one.

``make mutants`` breaks labkit one bug at a time and runs the lesson that teaches the broken
claim. A bug whose ``old`` text no longer occurs (the code moved on) would silently test
nothing, so each is checked here, in seconds, on every test run; the slow part (running the
lessons) is ``make mutants``, which ``.ci/run`` calls.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("break_labkit", ROOT / "scripts" / "break_labkit.py")
assert _spec and _spec.loader
break_labkit = importlib.util.module_from_spec(_spec)
sys.modules["break_labkit"] = break_labkit
_spec.loader.exec_module(break_labkit)

MUTANTS = break_labkit.load_mutants()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
def test_each_bug_still_applies_once_and_changes_the_code(mutant):
    text = (ROOT / mutant["path"]).read_text(encoding="utf-8")
    assert text.count(mutant["old"]) == 1, f"{mutant['path']}: the bug's old text occurs {text.count(mutant['old'])} times"
    assert mutant["new"] != mutant["old"]
    assert mutant["claim"].strip() and (mutant["unit_tests"] or mutant.get("equivalent")), "a claim, and a unit test that fails"
    for node in mutant["unit_tests"]:
        assert (ROOT / node.split("::")[0]).exists(), f"{node}: no such test file"


def test_the_lessons_named_by_issue_26_each_have_their_bug():
    named = {m["lesson"] for m in MUTANTS if m.get("issue26")}
    assert named >= {"08", "09", "11", "12", "13", "14"}, f"issue 26's bugs are missing for lessons other than {sorted(named)}"


def test_a_bug_whose_text_is_gone_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "labkit").mkdir()
    (tmp_path / "labkit" / "x.py").write_text("a = 1\n", encoding="utf-8")
    stale = {"name": "stale", "path": "labkit/x.py", "old": "a = 2\n", "new": "a = 3\n"}
    with pytest.raises(SystemExit, match="occurs 0 times"):
        break_labkit.apply(stale, tmp_path)
    assert (tmp_path / "labkit" / "x.py").read_text(encoding="utf-8") == "a = 1\n"


def test_every_bug_s_unit_tests_are_collected_with_the_plugins_its_run_leaves_out():
    """A bug's unit tests run without nbval (and without hypothesis where their files do not use it): a test that
    could not be collected that way would fail with every bug, and look caught. Each node id must be collected."""
    import subprocess

    for mutant in MUTANTS:
        args = break_labkit.unit_run(list(mutant["unit_tests"]), ROOT)
        assert "no:nbval" in args
        if not any("hypothesis" in (ROOT / node.split("::")[0]).read_text(encoding="utf-8") for node in mutant["unit_tests"]):
            assert "no:hypothesispytest" in args
    nodes = sorted({node for mutant in MUTANTS for node in mutant["unit_tests"]})
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *break_labkit.unit_run(nodes, ROOT),
                           "-p", "no:randomly"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    missing = [node for node in nodes
               if not any(line == node or line.startswith((node + "[", node + "::")) for line in collected)]
    assert not missing, f"not collected without nbval: {missing[:3]}"
