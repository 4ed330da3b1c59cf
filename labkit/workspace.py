"""A lesson's own scratch folder: a fresh database and provider log, removed at exit.

Each notebook makes one, so lessons never share files, can run in any order, and can be
run again from the top. Its text shows file names only, never the temporary folder.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .clock import TickingClock
from .coordinator import Coordinator
from .provider import CallLog, ReferenceProvider, call_log_for
from .store import connect


@dataclass
class Workspace:
    folder: Path
    db: Path
    clock: TickingClock = field(default_factory=TickingClock)

    @classmethod
    def create(cls, name: str) -> Workspace:
        folder = Path(tempfile.mkdtemp(prefix=f"labkit-{name}-"))
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
