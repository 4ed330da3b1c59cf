"""A learner's own copy of the lessons, and the reset that brings it back.

`make lab` opens my-lab/, made from notebooks/ on first use; `python -m labkit reset`
restores one lesson or all, keeps a backup of what it replaced, removes the scratch
folders lessons left behind (never one whose kernel still runs), and touches nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import labkit
from labkit.lab import workspace
from labkit.lab.processes import child_env

LESSONS = workspace.lesson_files()


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    root = tmp_path / "scratch"
    monkeypatch.setenv(workspace.SCRATCH_ENV, str(root))
    return root


@pytest.mark.parametrize("squat", ["every-user", "symlink", "another-user"])
def test_a_scratch_root_another_user_made_first_is_refused_never_used_nor_emptied(squat, tmp_path, scratch, cli_main, refused,
                                                                                  monkeypatch):
    """/tmp/labkit-lessons-UID is a predictable name: another user can make it before the learner."""
    copy = tmp_path / "my-lab"
    workspace.make_learner_copy(copy)
    (copy / LESSONS[4].name).write_text("my edits", encoding="utf-8")
    monkeypatch.setattr(workspace, "LEARNER_COPY", copy)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    left = theirs / "labkit-04-planted"
    left.mkdir()
    (left / workspace.MARKER).write_text(json.dumps({"lesson": "04", "pid": 2**22 + 1}), encoding="utf-8")
    if squat == "every-user":
        theirs.chmod(0o777)
        theirs.rename(scratch)
    elif squat == "symlink":
        scratch.symlink_to(theirs)
    else:
        if os.geteuid() != 0:
            pytest.skip("only root can give a folder to another user")
        os.chown(theirs, 65534, 65534)
        theirs.rename(scratch)
    with pytest.raises(workspace.ScratchRootNotPrivate):
        workspace.Workspace.create("04")
    refused(cli_main("reset", "--lesson", LESSONS[4].name[:2]), str(scratch), "another user could")
    assert [p.name for p in (scratch.resolve()).iterdir()] == ["labkit-04-planted"]
    assert (copy / LESSONS[4].name).read_text(encoding="utf-8") == "my edits", "refused before anything changed"
    assert not (copy / "backups").exists()


def test_the_first_copy_has_every_lesson_and_a_second_never_overwrites(tmp_path):
    copy = tmp_path / "my-lab"
    assert [p.name for p in workspace.make_learner_copy(copy)] == [p.name for p in LESSONS]
    answered = copy / LESSONS[1].name
    answered.write_text(answered.read_text(encoding="utf-8").replace("None", "'my answer'"), encoding="utf-8")
    saved = answered.read_bytes()
    assert workspace.make_learner_copy(copy) == []
    assert answered.read_bytes() == saved, "the learner's saved answers must survive make lab"


def test_reset_of_one_lesson_restores_it_keeps_a_backup_and_touches_nothing_else(tmp_path, scratch):
    copy = tmp_path / "my-lab"
    workspace.make_learner_copy(copy)
    mine, other = copy / LESSONS[2].name, copy / LESSONS[3].name
    mine.write_text("my edits", encoding="utf-8")
    other.write_text("other edits", encoding="utf-8")
    (copy / "notes.md").write_text("my notes", encoding="utf-8")
    report = workspace.reset(LESSONS[2].name[:2], copy)
    assert report.restored == [mine.name]
    assert mine.read_bytes() == workspace.learner_version(LESSONS[2])
    assert other.read_text(encoding="utf-8") == "other edits"
    assert (copy / "notes.md").read_text(encoding="utf-8") == "my notes"
    [backup] = report.backed_up
    assert (tmp_path / backup).read_text(encoding="utf-8") == "my edits"
    assert backup.startswith("my-lab/backups/"), "a folder JupyterLab's file browser shows (no leading dot)"


def test_reset_removes_only_scratch_left_by_dead_kernels(tmp_path, scratch):
    left_behind = subprocess.run(
        [sys.executable, "-c", "import os, labkit; ws = labkit.lab.Workspace.create('04'); print(ws.folder); os._exit(0)"],
        capture_output=True, text=True, env=child_env(), check=True,
    ).stdout.strip()
    assert os.path.isdir(left_behind), "a killed kernel cannot clean up: its folder stays"
    in_use = labkit.lab.Workspace.create("04")            # this process is alive
    other_lesson = subprocess.run(
        [sys.executable, "-c", "import os, labkit; print(labkit.lab.Workspace.create('05').folder); os._exit(0)"],
        capture_output=True, text=True, env=child_env(), check=True,
    ).stdout.strip()
    stranger = scratch / "labkit-04-not-ours"
    stranger.mkdir()
    (stranger / "data.db").write_text("someone else's", encoding="utf-8")
    report = workspace.reset("04", tmp_path / "my-lab")
    assert not os.path.exists(left_behind)
    assert in_use.folder.is_dir() and report.scratch_in_use == [in_use.folder.name]
    assert os.path.isdir(other_lesson), "resetting 04 leaves 05's scratch alone"
    assert (stranger / "data.db").exists(), "a folder without labkit's marker is never removed"


def test_reset_refuses_an_unknown_lesson(tmp_path, scratch, cli_main, refused):
    with pytest.raises(workspace.NotALesson):
        workspace.reset("99", tmp_path / "my-lab")
    refused(cli_main("reset", "--lesson", "99"), "no lesson '99'")


def test_a_workspace_marks_its_folder_for_reset(scratch):
    ws = labkit.lab.Workspace.create("03-exercise")
    marker = json.loads((ws.folder / workspace.MARKER).read_text(encoding="utf-8"))
    assert marker == {"lesson": "03-exercise", "pid": os.getpid(), "cwd": os.getcwd()}
    assert ws.folder.parent == scratch


def _tree(folder):
    """Every name under ``folder``: a link as where it points, a file as its bytes, a folder as such."""
    return {str(path.relative_to(folder)): (f"-> {os.readlink(path)}" if path.is_symlink() else
                                           "folder" if path.is_dir() else path.read_bytes())
            for path in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("kind", ["a file", "a dangling link"])
def test_reset_refuses_a_my_lab_that_is_not_a_folder(kind, tmp_path, scratch, cli_main, refused, monkeypatch):
    """Before the fix: an OSError, exit 1 (a run-time failure) for what is bad input, exit 2."""
    copy = tmp_path / "my-lab"
    if kind == "a file":
        copy.write_text("notes", encoding="utf-8")
    else:
        copy.symlink_to(tmp_path / "gone")
    monkeypatch.setattr(workspace, "LEARNER_COPY", copy)
    refused(cli_main("reset"), "my-lab is " + ("not a folder" if kind == "a file" else "a symlink to nothing"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-lab"] + (["scratch"] if (tmp_path / "scratch").exists() else [])


def test_reset_never_writes_through_a_symlink_in_my_lab(tmp_path, scratch, cli_main, refused, monkeypatch):
    copy = tmp_path / "my-lab"
    workspace.make_learner_copy(copy)
    monkeypatch.setattr(workspace, "LEARNER_COPY", copy)  # `reset` acts on the repository's my-lab/ otherwise
    outside, elsewhere = tmp_path / "outside.ipynb", tmp_path / "elsewhere"
    outside.write_bytes(b"the learner's own file, outside the lab")
    elsewhere.mkdir()
    lesson = copy / LESSONS[4].name
    number = LESSONS[4].name[:2]

    lesson.unlink()
    lesson.symlink_to(outside)
    before = _tree(copy)
    refused(cli_main("reset", "--lesson", number), f"my-lab/{lesson.name} is a symlink")
    refused(cli_main("reset"), f"my-lab/{lesson.name} is a symlink")
    assert outside.read_bytes() == b"the learner's own file, outside the lab"
    assert _tree(copy) == before

    lesson.unlink()
    lesson.write_text("my edits", encoding="utf-8")
    (copy / "backups").symlink_to(elsewhere)
    before = _tree(copy)
    refused(cli_main("reset", "--lesson", number), "my-lab/backups is a symlink")
    assert list(elsewhere.iterdir()) == [] and _tree(copy) == before

    (copy / "backups").unlink()
    lesson.unlink()
    os.mkfifo(lesson)  # reading one would wait for a writer forever
    refused(cli_main("reset", "--lesson", number), f"my-lab/{lesson.name} is not a plain file")

    lesson.unlink()
    lesson.write_text("my edits", encoding="utf-8")
    done = cli_main("reset", "--lesson", number)
    assert done.returncode == 0, done.stderr
    assert lesson.read_bytes() == workspace.learner_version(LESSONS[4]) and not lesson.is_symlink()
    [backup] = (copy / "backups").iterdir()
    assert backup.read_text(encoding="utf-8") == "my edits"


def test_the_first_copy_never_writes_through_a_link_left_in_my_lab(tmp_path):
    copy = tmp_path / "my-lab"
    copy.mkdir()
    dangling = copy / LESSONS[0].name
    dangling.symlink_to(tmp_path / "nowhere.ipynb")
    copied = workspace.make_learner_copy(copy)
    assert dangling not in copied and dangling.is_symlink()
    assert not (tmp_path / "nowhere.ipynb").exists(), "make lab wrote a lesson through a dangling link"
    assert len(copied) == len(LESSONS) - 1


def test_the_learners_copy_has_no_outputs_to_answer_a_prediction_and_the_same_cells(tmp_path):
    """A stored table above "predict, then run" would answer the prediction: the copy has none."""
    copy = tmp_path / "my-lab"
    workspace.make_learner_copy(copy)
    for lesson in LESSONS:
        committed = json.loads(lesson.read_text(encoding="utf-8"))
        mine = json.loads((copy / lesson.name).read_text(encoding="utf-8"))
        code = [cell for cell in mine["cells"] if cell["cell_type"] == "code"]
        assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code), lesson.name
        assert [cell["source"] for cell in mine["cells"]] == [cell["source"] for cell in committed["cells"]], lesson.name
        assert [cell["metadata"] for cell in mine["cells"]] == [cell["metadata"] for cell in committed["cells"]], lesson.name
    assert any(cell.get("outputs") for cell in json.loads(LESSONS[8].read_text(encoding="utf-8"))["cells"]), (
        "the committed lesson keeps its outputs (nbval compares them)"
    )


def _kernel_in(folder, lesson):
    """A stand-in for a lesson's kernel: a live process, started in ``folder`` as JupyterLab starts a
    notebook's kernel in the notebook's folder, that made the lesson's scratch folder (its marker)."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", f"import sys, labkit; print(labkit.lab.Workspace.create({lesson!r}).folder, flush=True); sys.stdin.read()"],
        cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
    )
    kernel.stdout.readline()
    return kernel


def test_reset_refuses_in_one_line_while_the_lessons_kernel_runs_in_my_lab(tmp_path, scratch, cli_main, refused, monkeypatch):
    """Issue 21: a reset under an open lesson was undone by one click on JupyterLab's "File Changed" dialog."""
    copy = tmp_path / "my-lab"
    workspace.make_learner_copy(copy)
    monkeypatch.setattr(workspace, "LEARNER_COPY", copy)
    number = LESSONS[4].name[:2]
    lesson = copy / LESSONS[4].name
    lesson.write_text("my edits", encoding="utf-8")
    kernel = _kernel_in(copy, number)
    try:
        before = _tree(copy)
        with pytest.raises(workspace.LessonOpen) as caught:
            workspace.reset(number, copy)
        assert caught.value.lessons == [number]
        outcome = cli_main("reset", "--lesson", number)
        refused(outcome, f"lesson {number} (kernel pid {kernel.pid}) is open in JupyterLab", "Shut Down Kernel", "nothing was changed")
        assert len(outcome.stderr.strip().splitlines()) == 1
        refused(cli_main("reset"), f"lesson {number} (kernel pid {kernel.pid}) is open")
        assert _tree(copy) == before, "refused before anything changed: no backup, the lesson as it was"
        other = LESSONS[5].name[:2]
        assert cli_main("reset", "--lesson", other).returncode == 0, "another lesson resets while 04 is open"
    finally:
        kernel.stdin.close()
        kernel.wait(timeout=30)
    done = cli_main("reset", "--lesson", number)
    assert done.returncode == 0, done.stderr
    assert lesson.read_bytes() == workspace.learner_version(LESSONS[4])
    assert "kept your previous copy as my-lab/backups/" in done.stdout


def test_a_kernel_of_the_lesson_running_elsewhere_does_not_block_the_reset(tmp_path, scratch):
    """The committed notebooks/ under nbval, or a lesson opened from another folder, is not my-lab/'s."""
    copy = tmp_path / "my-lab"
    workspace.make_learner_copy(copy)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kernel = _kernel_in(elsewhere, "04-kill")
    try:
        report = workspace.reset("04", copy)
        assert len(report.scratch_in_use) == 1, "its scratch folder is left alone, and said so"
    finally:
        kernel.stdin.close()
        kernel.wait(timeout=30)


def test_a_dead_kernels_marker_never_blocks_the_reset(tmp_path, scratch):
    copy = tmp_path / "my-lab"
    workspace.make_learner_copy(copy)
    left = scratch / "labkit-04-killed"
    left.mkdir(parents=True)
    (left / workspace.MARKER).write_text(json.dumps({"lesson": "04", "pid": 2**22 + 1, "cwd": str(copy)}), encoding="utf-8")
    report = workspace.reset("04", copy)
    assert report.scratch_removed == ["labkit-04-killed"]
