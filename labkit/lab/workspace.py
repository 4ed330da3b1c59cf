"""Where lessons keep their files: a scratch folder per lesson run, and the learner's own copy.

Each notebook makes a :class:`Workspace`: a fresh database and provider log in a folder of
its own under one scratch root, removed when the kernel exits. So lessons never share
files, can run in any order, and can be run again from the top. Its text shows file names
only, never the temporary folder.

The learner works in ``my-lab/``, a copy of ``notebooks/`` that ``make lab`` makes on first
use and git ignores, so saved answers never touch the committed lessons that ``make test``
checks. :func:`reset` brings a lesson (or every lesson) back to its committed state and
removes the scratch folders that lessons left behind, and nothing else.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sqlite3
import tempfile
import time
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


def scratch_root() -> Path:
    """The folder that holds every lesson's scratch folder (one per user)."""
    configured = os.environ.get(SCRATCH_ENV)
    root = Path(configured) if configured else Path(tempfile.gettempdir()) / f"labkit-lessons-{os.getuid()}"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
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
        (folder / MARKER).write_text(json.dumps({"lesson": name, "pid": os.getpid()}), encoding="utf-8")
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


def lesson_files() -> list[Path]:
    """The committed lessons, in order."""
    return sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def make_learner_copy(copy: Path = LEARNER_COPY) -> list[Path]:
    """Copy every committed lesson the learner's copy does not have yet; never overwrite one.

    Returns the lessons copied. Run by ``make lab`` each time, so a lesson added to the lab
    later appears in ``my-lab/`` without touching the learner's saved answers.
    """
    copy.mkdir(exist_ok=True)
    copied = []
    for lesson in lesson_files():
        target = copy / lesson.name
        if not target.exists():
            shutil.copyfile(lesson, target)
            copied.append(target)
    return copied


@dataclass(frozen=True)
class ResetReport:
    restored: list[str]
    backed_up: list[str]
    scratch_removed: list[str]
    scratch_in_use: list[str]


def reset(lesson: str | None = None, copy: Path = LEARNER_COPY) -> ResetReport:
    """Bring one lesson (``"04"``) or all of them back to the committed state.

    The learner's notebook is replaced by the committed one; if it differed, the replaced
    file is kept in ``my-lab/.backup/`` first. Scratch folders that lessons left behind
    (a kernel that was killed cannot remove its own) are removed, except those whose
    kernel is still running. Nothing else is touched: other files in ``my-lab/`` stay.
    """
    lessons = lesson_files()
    known = [path.name[:2] for path in lessons]
    if lesson is not None and lesson not in known:
        raise NotALesson(lesson, known)
    chosen = [path for path in lessons if lesson is None or path.name[:2] == lesson]
    copy.mkdir(exist_ok=True)
    restored, backed_up = [], []
    for committed in chosen:
        target = copy / committed.name
        if target.exists() and target.read_bytes() != committed.read_bytes():
            backup = copy / ".backup" / f"{target.stem}-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
            backup.parent.mkdir(exist_ok=True)
            shutil.copyfile(target, backup)
            backed_up.append(str(backup.relative_to(copy.parent)))
        shutil.copyfile(committed, target)
        restored.append(target.name)
    removed, in_use = _remove_scratch({path.name[:2] for path in chosen})
    return ResetReport(restored, backed_up, removed, in_use)


def _remove_scratch(lessons: set[str]) -> tuple[list[str], list[str]]:
    removed, in_use = [], []
    for folder in sorted(scratch_root().iterdir()):
        marker = folder / MARKER
        if folder.is_symlink() or not folder.is_dir() or not marker.is_file():
            continue  # not made by Workspace.create: never ours to remove
        try:
            made_by = json.loads(marker.read_text(encoding="utf-8"))
            name, pid = str(made_by["lesson"]), int(made_by["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if name[:2] not in lessons:
            continue
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
