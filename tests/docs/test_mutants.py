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
