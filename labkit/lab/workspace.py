"""Where lessons keep their files: a scratch folder per lesson run, and the learner's own copy.

Each notebook makes a :class:`Workspace`: a fresh database and provider log in a folder of
its own under one scratch root, removed when the kernel exits. So lessons never share
files, can run in any order, and can be run again from the top. Its text shows file names
only, never the temporary folder.

The learner works in ``my-lab/``, a copy of ``notebooks/`` that ``make lab`` makes on first
use and git ignores, so saved answers never touch the committed lessons that ``make test``
checks. The copy has no outputs (:func:`learner_version`): a lesson asks the learner to
predict a table before running the cell that prints it, and a stored table would answer
first. The committed lessons keep theirs, for nbval and for the reading copy. :func:`reset`
brings a lesson (or every lesson) back to its committed state, keeping what it replaces in
``my-lab/backups/`` (a folder the file browser shows), and removes the scratch folders that
lessons left behind, and nothing else. It refuses while the lesson's kernel runs in ``my-lab/``:
JupyterLab's "File Changed" dialog would offer to save the open, old copy over the reset one. Neither ever writes
through a symlink in ``my-lab/``: a link there may point at any file of the learner's.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..clock import TickingClock
from ..coordinator import Coordinator
from ..errors import BadInput
from ..provider import CallLog, ReferenceProvider, call_log_for
from ..store import connect

#: Marks a folder as a lesson's scratch folder; only folders holding it are ever removed.
MARKER = ".labkit-lesson"
#: Overrides where lesson scratch folders are made (tests point it at their own folder).
SCRATCH_ENV = "LABKIT_SCRATCH_DIR"

REPOSITORY = Path(__file__).resolve().parents[2]
LESSONS = REPOSITORY / "notebooks"
LEARNER_COPY = REPOSITORY / "my-lab"


class ScratchRootNotPrivate(BadInput):
    def __init__(self, root: Path, found: str):
        self.root = root
        super().__init__(f"the lessons' scratch folder {root} {found}: another user could read, plant or swap a "
                         f"lesson's files there; remove it (or set {SCRATCH_ENV} to a folder of your own)")


def not_private(found: os.stat_result) -> str | None:
    """Why a folder (its ``lstat``) is not one only this user controls, or None: another user owns
    it, or every user can write to it (the sticky bit does not help: it stops removal, not
    planting). The lessons' scratch root and the explorer's ``--db-dir`` both ask."""
    if found.st_uid != os.geteuid():
        return f"belongs to another user (uid {found.st_uid})"
    if found.st_mode & stat.S_IWOTH:
        return "can be written by every user"
    return None


def scratch_root() -> Path:
    """The folder that holds every lesson's scratch folder (one per user).

    Its name in the shared temporary folder is predictable, so another user could make it
    first: a folder that is a symlink, belongs to someone else, or that every user can write
    to is refused (:class:`ScratchRootNotPrivate`) rather than used, and never emptied by reset.
    """
    configured = os.environ.get(SCRATCH_ENV)
    root = Path(configured) if configured else Path(tempfile.gettempdir()) / f"labkit-lessons-{os.getuid()}"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = root.lstat()
    if stat.S_ISLNK(found.st_mode):
        raise ScratchRootNotPrivate(root, "is a symlink")
    if (problem := not_private(found)) is not None:
        raise ScratchRootNotPrivate(root, problem)
    return root


@dataclass
class Workspace:
    folder: Path
    db: Path
    clock: TickingClock = field(default_factory=TickingClock)

    @classmethod
    def create(cls, name: str) -> Workspace:
        """A new scratch folder for lesson ``name`` (e.g. ``"04"``), removed when this process exits."""
        folder = Path(tempfile.mkdtemp(prefix=f"labkit-{name}-", dir=scratch_root()))
        # the kernel's folder (a notebook's kernel runs in the notebook's folder): reset asks whether it is my-lab/
        marker = {"lesson": name, "pid": os.getpid(), "cwd": os.getcwd()}
        (folder / MARKER).write_text(json.dumps(marker), encoding="utf-8")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return cls(folder, folder / f"{name}.db")

    @property
    def call_log(self) -> Path:
        return call_log_for(self.db)

    @property
    def provider_log(self) -> CallLog:
        return CallLog(self.call_log)

    def provider(self, data: str | Path | None = None) -> ReferenceProvider:
        return ReferenceProvider(self.call_log, data)

    def connect(self) -> sqlite3.Connection:
        return connect(self.db)

    def coordinator(self, conn: sqlite3.Connection, **options) -> Coordinator:
        """A coordinator on ``conn`` with this lesson's provider and clock (override either)."""
        options.setdefault("clock", self.clock)
        return Coordinator(conn, options.pop("provider", None) or self.provider(), **options)

    def __repr__(self) -> str:
        return f"Workspace(db={self.db.name!r})"


# --------------------------------------------------------------------------- the learner's copy


class NotALesson(BadInput):
    def __init__(self, lesson: str, known: list[str]):
        self.lesson = lesson
        super().__init__(f"no lesson {lesson!r} in notebooks/: expected one of {', '.join(known)}")


#: The folder of ``my-lab/`` where reset keeps what it replaced (visible: no leading dot).
BACKUPS = "backups"


class LessonOpen(BadInput):
    """A lesson reset would replace has a kernel running in ``my-lab/``: in JupyterLab, one click on
    the "File Changed" dialog (or a save) would write the open, old notebook over the reset one."""

    def __init__(self, open_lessons: dict[str, int]):
        self.lessons = sorted(open_lessons)
        shown = ", ".join(f"{lesson} (kernel pid {pid})" for lesson, pid in sorted(open_lessons.items()))
        super().__init__(f"lesson {shown} is open in JupyterLab: shut its kernel down first (Kernel → Shut Down Kernel) "
                         "and close its tab, then reset again; nothing was changed")


class NotAPlainFile(BadInput):
    """A name reset would replace (a lesson in ``my-lab/``, or ``my-lab/backups``) holds something
    else: a symlink, which it would write through, a folder, a FIFO."""

    def __init__(self, path: Path, found: str):
        self.path = path
        super().__init__(f"{path} is {found}: reset replaces only plain files and never writes through a link; "
                         "move it away and reset again")


def lesson_files() -> list[Path]:
    """The committed lessons, in order."""
    return sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def learner_version(lesson: Path) -> bytes:
    """A committed lesson as the learner gets it: every code cell's outputs and execution count cleared.

    Cleared for all cells, not for prediction cells only: a prediction may be answered by any
    later table, and a marking that misses one would spoil it without anyone noticing.
    """
    import nbformat  # here, not at the top: the command line's other verbs should not pay for it

    notebook = nbformat.reads(lesson.read_text(encoding="utf-8"), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return (nbformat.writes(notebook) + "\n").encode("utf-8")


def make_learner_copy(copy: Path = LEARNER_COPY) -> list[Path]:
    """Copy every committed lesson the learner's copy does not have yet; never overwrite one.

    Returns the lessons copied. Run by ``make lab`` each time, so a lesson added to the lab
    later appears in ``my-lab/`` without touching the learner's saved answers.
    """
    copy.mkdir(exist_ok=True)
    copied = []
    for lesson in lesson_files():
        target = copy / lesson.name
        try:  # a new file or nothing: a name already there (a link too, even a dangling one) is the learner's
            _write_new(target, learner_version(lesson))
        except FileExistsError:
            continue
        copied.append(target)
    return copied


@dataclass(frozen=True)
class ResetReport:
    restored: list[str]
    backed_up: list[str]
    scratch_removed: list[str]
    scratch_in_use: list[str]


def reset(lesson: str | None = None, copy: Path | None = None) -> ResetReport:
    """Bring one lesson (``"04"``) or all of them back to the committed state.

    The learner's notebook is replaced by the committed one (without outputs, as
    :func:`make_learner_copy` makes it); if it differed, the replaced
    file is kept in ``my-lab/backups/`` first. Scratch folders that lessons left behind
    (a kernel that was killed cannot remove its own) are removed, except those whose
    kernel is still running. Nothing else is touched: other files in ``my-lab/`` stay.
    Refused before anything changes: a chosen lesson whose kernel runs in ``my-lab/``
    (:class:`LessonOpen`), and a lesson's name (or ``backups``) holding a symlink, a folder or
    a FIFO (:class:`NotAPlainFile`): a link may point anywhere, outside the lab.
    """
    copy = LEARNER_COPY if copy is None else copy
    lessons = lesson_files()
    known = [path.name[:2] for path in lessons]
    if lesson is not None and lesson not in known:
        raise NotALesson(lesson, known)
    chosen = [path for path in lessons if lesson is None or path.name[:2] == lesson]
    scratch_root()  # refused before anything changes, as a name below is
    # my-lab itself may be a folder or a link to one (the learner chose where it lives), but not
    # a file or a link to nothing: either failed later as an OSError, exit 1 for bad input.
    if copy.is_symlink() and not copy.exists():
        raise NotAPlainFile(Path(copy.name), "a symlink to nothing")
    if copy.exists() and not copy.is_dir():
        raise NotAPlainFile(Path(copy.name), "not a folder")
    backups = copy / BACKUPS
    _refuse_unless_plain(backups, copy, folder=True)
    for committed in chosen:
        _refuse_unless_plain(copy / committed.name, copy)
    if open_lessons := _kernels_in(copy, {path.name[:2] for path in chosen}):
        raise LessonOpen(open_lessons)
    copy.mkdir(exist_ok=True)
    restored, backed_up = [], []
    for committed in chosen:
        target, wanted = copy / committed.name, learner_version(committed)
        previous = _read_plain(target)
        if previous is not None and previous != wanted:
            backups.mkdir(exist_ok=True)
            backup = _backup(backups / f"{target.stem}-{time.strftime('%Y%m%d-%H%M%S')}", previous)
            backed_up.append(str(backup.relative_to(copy.parent)))
        _replace(target, wanted)
        restored.append(target.name)
    removed, in_use = _remove_scratch({path.name[:2] for path in chosen})
    return ResetReport(restored, backed_up, removed, in_use)


def _refuse_unless_plain(path: Path, copy: Path, *, folder: bool = False) -> None:
    """Refuse ``path`` unless it is missing, or a plain file (``folder``: a real folder), never a link."""
    try:
        found = path.lstat()  # lstat: the name itself, not what a link there points at
    except FileNotFoundError:
        return
    shown = path.relative_to(copy.parent)
    if stat.S_ISLNK(found.st_mode):
        raise NotAPlainFile(shown, "a symlink")
    if folder and not stat.S_ISDIR(found.st_mode):
        raise NotAPlainFile(shown, "not a folder")
    if not folder and not stat.S_ISREG(found.st_mode):
        raise NotAPlainFile(shown, "a folder" if stat.S_ISDIR(found.st_mode) else "not a plain file")


def _read_plain(path: Path) -> bytes | None:
    """The bytes of the plain file at ``path``, None if there is none; a link put there since the
    check fails (O_NOFOLLOW) instead of being read, and a FIFO cannot block (O_NONBLOCK)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with open(descriptor, "rb") as file:
        return file.read()


def _write_new(path: Path, data: bytes) -> None:
    """Make ``path`` a new file holding ``data``; FileExistsError if the name holds anything,
    a symlink included (O_EXCL never follows one)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    with open(descriptor, "wb") as file:
        file.write(data)


def _backup(stem: Path, data: bytes) -> Path:
    """``data`` in a new file ``stem.ipynb`` (``stem-2.ipynb`` ... when two resets share a second)."""
    for number in range(1, 100):
        path = stem.with_name(f"{stem.name}{'' if number == 1 else f'-{number}'}.ipynb")
        try:
            _write_new(path, data)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{stem}: 99 backups in one second")


def _replace(target: Path, data: bytes) -> None:
    """Put ``data`` at ``target``: a new file written beside it, then renamed over the name.
    A rename replaces what the name held and never writes into it, and a crash leaves the old file."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.reset")
    with suppress(FileNotFoundError):
        temporary.unlink()  # left by a reset that was killed: the name only, never followed
    _write_new(temporary, data)
    os.replace(temporary, target)


def _scratch_folders(lessons: set[str]) -> list[tuple[Path, str, int, str | None]]:
    """The scratch folders of ``lessons`` (folder, lesson, kernel pid, kernel folder if recorded)."""
    found = []
    for folder in sorted(scratch_root().iterdir()):
        marker = folder / MARKER
        if folder.is_symlink() or not folder.is_dir() or not marker.is_file():
            continue  # not made by Workspace.create: never ours to remove
        try:
            made_by = json.loads(marker.read_text(encoding="utf-8"))
            name, pid = str(made_by["lesson"]), int(made_by["pid"])
            cwd = made_by.get("cwd")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if name[:2] in lessons:
            found.append((folder, name[:2], pid, cwd if isinstance(cwd, str) else None))
    return found


def _kernels_in(copy: Path, lessons: set[str]) -> dict[str, int]:
    """The chosen lessons whose kernel is running in ``copy`` (lesson -> pid). The kernel's folder is
    read live where the system shows it (Linux: /proc/PID/cwd, so a reused pid is not mistaken for
    the kernel), else from the marker; a marker from before markers recorded it counts as open."""
    where = copy.resolve()
    running: dict[str, int] = {}
    for _, lesson, pid, recorded in _scratch_folders(lessons):
        if not _alive(pid):
            continue
        try:
            cwd: str | None = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = recorded
        if cwd is None or Path(cwd).resolve() == where:
            running.setdefault(lesson, pid)
    return running


def _remove_scratch(lessons: set[str]) -> tuple[list[str], list[str]]:
    removed, in_use = [], []
    for folder, _, pid, _ in _scratch_folders(lessons):
        if _alive(pid):
            in_use.append(folder.name)
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder.name)
    return removed, in_use


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
