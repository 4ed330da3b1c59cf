"""labkit.children: the one toolkit for child processes (pumps, fork, in_child), and what it may import."""

from __future__ import annotations

import ast
import io
import os
import queue
import signal
import subprocess
import sys
from pathlib import Path

from labkit import children


def test_it_imports_nothing_from_labkit_so_the_leased_worker_can_use_it():
    tree = ast.parse(Path(children.__file__).read_text(encoding="utf-8"))
    relative = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]
    absolute = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0]
    absolute += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert relative == [] and [name for name in absolute if name.split(".")[0] == "labkit"] == [], (relative, absolute)


def test_a_pump_tags_every_line_and_says_when_the_stream_ends():
    events: queue.Queue = queue.Queue()
    # get(timeout=30): a bound on a hang only (the pump thread needs microseconds, a loaded machine more)
    children.pump(io.StringIO("one\ntwo\n"), events, 7, "out")
    assert [events.get(timeout=30) for _ in range(3)] == [(7, "out", "one\n"), (7, "out", "two\n"), (7, "out", None)]
    children.pump(None, events, 8)
    assert events.get(timeout=30) == (8, None)


def test_collect_keeps_everything_a_started_child_said():
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('a', file=sys.stderr); print('b', file=sys.stderr)"],
                             stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    children.collect(child.stderr, said).join(timeout=30)
    assert child.wait(timeout=30) == 0 and said == ["a\n", "b\n"]


def test_a_forked_child_exits_with_its_code_and_reports_its_error(tmp_path):
    assert children.in_child(lambda: None) == children.ChildEnd(killed=False, code=0)
    assert children.in_child(lambda: sys.exit(3)).code == 3
    failed = children.in_child(lambda: 1 / 0)
    assert (failed.code, failed.error) == (1, "ZeroDivisionError: division by zero")
    assert children.in_child(lambda: os.kill(os.getpid(), signal.SIGKILL)).killed
    out, err = tmp_path / "out", tmp_path / "err"
    assert children.in_child(lambda: print("to the file"), output=(out, err)).code == 0
    assert out.read_text() == "to the file\n" and err.read_text() == ""


def test_how_a_started_child_ended_is_said_in_words():
    assert (children.ended(0), children.ended(2), children.ended(-9)) == ("exit 0", "exit 2", "killed by SIGKILL")


def test_a_started_child_runs_this_labkit():
    env = children.this_labkit({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [children.PACKAGE_ROOT, "/elsewhere"]
