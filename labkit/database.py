"""The one way labkit opens a SQLite file, and the one way it runs a transaction.

Everything durable goes through here: :func:`check_path` decides whether a path may be
used before SQLite sees it; :func:`open_database` is the only call of
``sqlite3.connect``; :func:`transaction` is the only place that begins a write
transaction (:func:`write_lock` holds one without writing, for lessons that make others
wait); :func:`read_transaction` gives several reads one moment. SQLite's errors are
classified here by their error code (:func:`translate`), never by their message text.

The checkpoint schema (which tables, which version, "is this file ours") lives in
:mod:`labkit.store`; this module knows nothing about it. Taught in 03_durable_checkpoint
and 04_rollback.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext
from pathlib import Path

from .errors import (
    BadDatabasePath,
    BadSetting,
    DatabaseDamaged,
    DatabaseFolderMissing,
    DatabaseMissing,
    DatabaseUnavailable,
    LabError,
    NotADatabase,
    NotARegularFile,
    NotInTransaction,
    RuleViolation,
    shown,
)
from .typed import parse_whole

SQLITE_HEADER = b"SQLite format 3\x00"

#: The statement that takes SQLite's write lock; measurements watch for it (10_leases_and_fencing).
BEGIN_WRITE = "BEGIN IMMEDIATE"

#: How long a writer waits for another process's write lock before giving up, in ms.
#: Long enough for the lab's concurrent-completion race; short enough to notice a hang.
BUSY_TIMEOUT_MS = 10_000

#: Environment variable that shortens (or lengthens) that wait, so a lesson can show a
#: writer giving up without waiting ten seconds (02_three_states, 10_leases_and_fencing).
BUSY_TIMEOUT_ENV = "LABKIT_BUSY_TIMEOUT_MS"


def busy_timeout_ms() -> int:
    """The busy timeout in ms: :data:`BUSY_TIMEOUT_MS`, or ``LABKIT_BUSY_TIMEOUT_MS`` when set."""
    text = os.environ.get(BUSY_TIMEOUT_ENV)
    if not text:
        return BUSY_TIMEOUT_MS
    try:
        value = parse_whole(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 600_000:
        raise BadSetting(BUSY_TIMEOUT_ENV, text, "a whole number of milliseconds from 1 to 600000")
    return value

#: Files SQLite (and labkit's provider log) keep beside a database; the longest decides
#: whether a file name is too long to use.
SIDECARS = ("-wal", "-shm", "-journal", ".provider-calls.jsonl")

# SQLite's primary result codes (https://www.sqlite.org/rescode.html); an extended code
# keeps its primary code in the low byte.
SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR, SQLITE_CORRUPT = 5, 6, 8, 10, 11
SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_CONSTRAINT, SQLITE_NOTADB = 13, 14, 19, 26


class LabConnection(sqlite3.Connection):
    """A connection that knows its file and whether it holds the write lock.

    ``sqlite3.Connection.in_transaction`` is also true inside a read transaction, where a
    write would try to upgrade the lock and could fail at once with "database is
    locked". Write helpers therefore check :attr:`in_write_transaction`.
    """

    path: Path
    in_write_transaction: bool = False
    #: The busy timeout it was opened with, so a write need not ask SQLite for it each time.
    busy_timeout_ms: int = BUSY_TIMEOUT_MS
    _file_id: tuple[int, int] | None = None

    def close(self) -> None:
        # Forgotten only once SQLite has closed it: until then another thread must not open
        # the file by hand, or closing that descriptor would drop the locks it still holds.
        try:
            super().close()
        finally:
            with _OPENING:
                _forget(self)

    def __del__(self) -> None:  # a connection dropped without close() must not pin its file
        with _OPENING:
            _forget(self)


#: (device, inode) of every file a LabConnection of this process has open, with how many.
#: POSIX drops ALL of a process's fcntl locks on a file as soon as ANY descriptor of that
#: file is closed. SQLite guards its own descriptors against this, but a descriptor opened
#: and closed beside it (our header check) would silently release the locks an open
#: connection holds: another process could then think itself the last user and delete the
#: write-ahead log in use (seen as "Rowid out of order" corruption in the worker soak). So
#: while a connection is open here, this process never opens that file by hand.
_OPEN_FILES: dict[tuple[int, int], int] = {}
#: Held while a connection is opened (the header check, the connect, the count) and while one
#: is forgotten. Without it, one thread could find no connection open, open the file by hand,
#: and close that descriptor just after another thread's new connection took its first lock:
#: a service answering requests on several threads lost acknowledged rows that way. Reentrant,
#: because a connection dropped by the garbage collector is forgotten in whatever thread runs.
_OPENING = threading.RLock()


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _remember(conn: LabConnection) -> None:
    conn._file_id = _file_id(conn.path)
    if conn._file_id is not None:
        _OPEN_FILES[conn._file_id] = _OPEN_FILES.get(conn._file_id, 0) + 1


def _forget(conn: LabConnection) -> None:
    key, conn._file_id = conn._file_id, None
    if key is not None:
        left = _OPEN_FILES.get(key, 0) - 1
        if left > 0:
            _OPEN_FILES[key] = left
        else:
            _OPEN_FILES.pop(key, None)


def held_open_here(path: Path) -> bool:
    """Whether a labkit connection of this process has ``path`` open (so: do not open it by hand)."""
    key = _file_id(path)
    return key is not None and key in _OPEN_FILES


def names_a_folder(text: str) -> bool:
    """A path typed with a trailing slash names a folder, whatever is there: ``Path("lab.db/")``
    would quietly drop the slash and make it a file, so every path option asks this first."""
    return text.endswith(os.sep)


def typed_path_problem(text: str, what: str) -> str | None:
    """Why a file path typed on a command line is refused (``what`` names it), or None.

    Taken as typed: ``Path()`` would turn "" into "." and "lab.db/" into "lab.db".
    """
    if not text:
        return f"the {what} path is empty"
    if names_a_folder(text):
        return f"{shown(text)} ends with a slash, so it names a folder; give a file path"
    return None


def check_path(path: str | Path, *, must_exist: bool) -> Path:
    """The database path, or a one-line refusal before any file is created or opened.

    Refused: SQLite's special names (``:memory:``, ``file:`` URIs), a name too long to
    carry its sidecar files, a symlink loop, a missing folder, a folder, anything that is
    not a regular file (a FIFO would block the opener for ever), and, with
    ``must_exist``, a path where no database exists: a mistyped path must not quietly
    become a new, empty database.
    """
    text = str(path)
    if text == "" or text.startswith(":memory:"):
        raise BadDatabasePath(text, "SQLite would keep it in memory and lose it at exit; give a file path")
    if text.startswith("file:"):
        raise BadDatabasePath(text, "it looks like a SQLite URI; give a plain file path")
    if names_a_folder(text):
        raise BadDatabasePath(text, "it names a folder (it ends with a slash); give a file path")
    path = Path(text)
    try:
        # The sidecars sit beside the file the path leads to, which for a symlink is its target.
        names = {path.name, path.resolve().name}
    except (RuntimeError, OSError):
        raise BadDatabasePath(text, "it is a symbolic link loop") from None
    name_max = _name_max(path.parent)
    longest = max(len((name + sidecar).encode("utf-8", "surrogateescape")) for name in names for sidecar in SIDECARS)
    if longest > name_max:
        raise BadDatabasePath(text, f"the file name is too long: with its sidecar files it needs {longest} bytes, the limit is {name_max}")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise BadDatabasePath(text, "it is a symbolic link loop") from None
        if error.errno == errno.ENOTDIR:
            raise DatabaseFolderMissing(str(path.parent)) from None
        if error.errno == errno.ENAMETOOLONG:
            raise BadDatabasePath(text, "the path is too long for this system") from None
        raise DatabaseUnavailable(text, error.strerror or str(error)) from None
    if info is None:
        # A symlink to a database not made yet is followed, as the user asked: SQLite
        # creates the file where the link points, so that folder must exist.
        folder = path.resolve().parent
        if not folder.is_dir():
            raise DatabaseFolderMissing(str(folder))
        if must_exist:
            raise DatabaseMissing(text)
        return path
    if stat.S_ISDIR(info.st_mode):
        raise NotADatabase(text, "it is a folder")
    if not stat.S_ISREG(info.st_mode):
        raise NotADatabase(text, "it is not a regular file")
    if info.st_nlink > 1:
        # SQLite finds its -wal and its locks by name: through a second name a process would
        # not see the other's log, and could miss committed work or corrupt the file.
        raise BadDatabasePath(text, f"it has {info.st_nlink} hard links, and SQLite cannot keep a database consistent through two names")
    return path


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder if folder.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def open_database(path: Path, *, readonly: bool = False) -> LabConnection:
    """Open ``path`` (already passed through :func:`check_path`) with the lab's settings.

    - ``isolation_level=None``: Python's sqlite3 would otherwise open transactions on its
      own, and only before writes, so the read that decides a write would sit outside it.
      :func:`transaction` issues ``BEGIN IMMEDIATE`` itself.
    - ``busy_timeout``: a second process waits for the write lock instead of failing.
    - ``foreign_keys``: evidence and receipts cannot point at a run that does not exist.
    - ``readonly``: reading must not need to write. The connection is ``query_only``, and
      ordinary where it can be (so on close SQLite still tidies its ``-wal`` and ``-shm``
      files away); otherwise ``mode=ro``; and in a folder where SQLite can neither create
      nor find the shared-memory file a WAL reader needs, ``immutable`` (nobody can be
      writing: a writer would need that same file), unless a write-ahead log is waiting
      to be merged.

    Journal mode and ``synchronous`` are set by :func:`labkit.store.connect`, after it has
    decided the file is a labkit database: those pragmas write to the file.
    The file's first bytes are checked before SQLite sees it, so a file that is not a
    database is left byte for byte as it was.
    """
    # Skipped while this process has the file open: it was checked when first opened, and
    # closing a descriptor of our own would drop that connection's locks (see _OPEN_FILES).
    with _OPENING:  # the check, the connect and the count, with no other thread's open between them
        if path.exists() and not held_open_here(path):
            try:
                # Not a plain open(): the file may have become a FIFO since check_path looked.
                fd = open_regular_file(path, os.O_RDONLY, "database", follow_symlinks=True)
                with os.fdopen(fd, "rb") as handle:
                    header = handle.read(len(SQLITE_HEADER))
            except OSError as error:
                raise DatabaseUnavailable(str(path), error.strerror or str(error)) from None
            if header and header != SQLITE_HEADER:  # an empty file is a new, empty database
                raise NotADatabase(str(path))
        conn = _open_for_reading(path) if readonly else _connect(str(path), uri=False)
        conn.path = path
        _remember(conn)
    try:
        conn.busy_timeout_ms = busy_timeout_ms()
        conn.execute(f"PRAGMA busy_timeout = {conn.busy_timeout_ms}")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as error:
        conn.close()
        raise translate(error, path) from None
    return conn


def file_identity(conn: sqlite3.Connection) -> tuple[int, int, list[tuple]]:
    """A SQLite file's application id, user version and schema entries (type, name, table, sql).

    One statement, so another process's migration cannot commit between the three (it did,
    when they were read one by one). What each opener accepts is its own rule.
    """
    with read_transaction(conn):
        app_id, version, entries = conn.execute(
            "SELECT (SELECT application_id FROM pragma_application_id),"
            " (SELECT user_version FROM pragma_user_version),"
            " (SELECT json_group_array(json_array(type, name, tbl_name, sql)) FROM"
            "  (SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name))"
        ).fetchone()
    return app_id, version, [tuple(entry) for entry in json.loads(entries)]


@contextmanager
def closed_on_failure(conn: sqlite3.Connection, path: Path) -> Iterator[sqlite3.Connection]:
    """While a file just opened is identified and set up: on any failure ``conn`` is closed, and a
    SQLite error becomes labkit's one-line error naming ``path``. Every opener of a file uses it."""
    try:
        yield conn
    except sqlite3.Error as error:
        conn.close()
        raise translate(error, path) from None
    except BaseException:
        conn.close()
        raise


def _connect(target: str, *, uri: bool) -> LabConnection:
    try:
        conn = sqlite3.connect(target, uri=uri, isolation_level=None, timeout=busy_timeout_ms() / 1000, factory=LabConnection)
    except sqlite3.Error as error:
        raise translate(error, Path(target)) from None
    conn.row_factory = sqlite3.Row
    return conn


def _open_for_reading(path: Path) -> LabConnection:
    """A connection that cannot write, tried in three ways from the most ordinary.

    The file system is asked by trying, not predicted: ``os.access`` says yes to root on
    a read-only mount.
    """
    uri = path.absolute().as_uri()
    for target, is_uri in ((str(path), False), (uri + "?mode=ro", True)):
        conn = _connect(target, uri=is_uri)
        try:
            conn.execute("PRAGMA query_only = ON")
            # Opening is lazy: the first read is what needs the shared-memory file.
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error as error:
            conn.close()
            if _primary(error) not in (SQLITE_READONLY, SQLITE_CANTOPEN):
                raise translate(error, path) from None
            failure = error
    # SQLite could neither create nor open the shared-memory file a WAL reader needs. If
    # none exists, no writer can be at work either (it would need that file), so the
    # file can be read as immutable, unless its log holds commits not yet merged.
    wal = Path(str(path) + "-wal")
    if Path(str(path) + "-shm").exists():
        raise translate(failure, path)
    if wal.exists() and wal.stat().st_size > 0:
        raise DatabaseUnavailable(
            str(path), "its folder is read-only and its write-ahead log holds commits not yet merged; make the folder writable"
        )
    conn = _connect(uri + "?immutable=1", uri=True)
    conn.execute("PRAGMA query_only = ON")
    return conn


#: The longest SQLite waits for the write lock in one go. Python sees a Ctrl-C only when
#: SQLite's wait returns (SQLite sleeps through signals, and sqlite3_interrupt does not end
#: a busy wait), so the busy timeout is spent in slices this long, a Ctrl-C answered in one.
LOCK_WAIT_SLICE_MS = 100


def _take_write_lock(conn: sqlite3.Connection) -> None:
    """``BEGIN IMMEDIATE``, waiting up to the connection's busy timeout as before, in slices."""
    total_ms = conn.busy_timeout_ms if isinstance(conn, LabConnection) else conn.execute("PRAGMA busy_timeout").fetchone()[0]
    if total_ms <= LOCK_WAIT_SLICE_MS:
        conn.execute(BEGIN_WRITE)
        return
    deadline = time.monotonic() + total_ms / 1000
    conn.execute(f"PRAGMA busy_timeout = {LOCK_WAIT_SLICE_MS}")
    try:
        while True:
            try:
                conn.execute(BEGIN_WRITE)
                return
            except sqlite3.OperationalError as error:
                if _primary(error) != SQLITE_BUSY or time.monotonic() >= deadline:
                    raise
    finally:
        # PRAGMA takes no parameters; the value is an integer labkit set or read itself.
        conn.execute(f"PRAGMA busy_timeout = {int(total_ms)}")


@contextmanager
def _atomic(conn: sqlite3.Connection, begin: str, *, commit: bool) -> Iterator[sqlite3.Connection]:
    writing = begin == BEGIN_WRITE
    was_open = conn.in_transaction  # then BEGIN fails, and the caller's transaction is not ours to end
    try:
        if writing:
            _take_write_lock(conn)
            if isinstance(conn, LabConnection):
                conn.in_write_transaction = True
        else:
            conn.execute(begin)
        yield conn
        conn.execute("COMMIT" if commit else "ROLLBACK")
    except BaseException:
        # SQLite may already have rolled back on its own (a full disk, an I/O error); a
        # second ROLLBACK would then raise and hide the error that matters. A Ctrl-C may
        # also arrive just as a slice of the lock wait succeeded: that BEGIN is undone too.
        if conn.in_transaction and not was_open:
            conn.execute("ROLLBACK")
        raise
    finally:
        if writing and isinstance(conn, LabConnection) and not was_open:
            conn.in_write_transaction = False


def transaction(conn: sqlite3.Connection) -> AbstractContextManager[sqlite3.Connection]:
    """One atomic unit of work: ``BEGIN IMMEDIATE``, commit on success, roll back on anything.

    IMMEDIATE takes the write lock up front. A deferred transaction that reads and then
    upgrades to a write can fail at once with "database is locked", skipping the busy timeout.
    Any exception, ``KeyboardInterrupt`` included, rolls back. A SIGKILL runs no code at all;
    SQLite discards the uncommitted work when the file is next opened.
    """
    return _atomic(conn, BEGIN_WRITE, commit=True)


def write_lock(conn: sqlite3.Connection) -> AbstractContextManager[sqlite3.Connection]:
    """Hold the database's write lock and write nothing; everyone else's writes wait.

    For lessons and tests that need other processes to queue (:func:`labkit.lab.race`).
    """
    return _atomic(conn, BEGIN_WRITE, commit=False)


def read_transaction(conn: sqlite3.Connection) -> AbstractContextManager[sqlite3.Connection]:
    """Several reads that see one committed moment, without taking the write lock.

    In WAL mode a reader neither waits for nor blocks the writer. Inside a caller's open
    transaction, that transaction already gives one moment, so nothing more is done.
    """
    if conn.in_transaction:
        return nullcontext(conn)
    return _atomic(conn, "BEGIN DEFERRED", commit=True)


def schema_made_by(statements: list[str]) -> list[tuple[str, str, str, str | None]]:
    """The ``sqlite_master`` rows that ``statements`` create in an empty database.

    Made in a private in-memory database, so that :func:`labkit.store.connect` can tell a
    file labkit made (whose schema is exactly this) from one another program made.
    """
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as scratch:
        for statement in statements:
            scratch.execute(statement)
        return [tuple(row) for row in scratch.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")]


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a file whose pages are damaged before anything is written to it.

    ``PRAGMA quick_check`` reads every page (milliseconds for a lab database). Without it a
    damaged file may take some writes and fail on others, half way through a command.
    """
    try:
        found = [row[0] for row in conn.execute("PRAGMA quick_check")]
    except sqlite3.Error as error:
        raise translate(error, path) from None
    if found != ["ok"]:
        first = " ".join(found[0].split())  # SQLite's report runs over several lines
        raise DatabaseDamaged(str(path), f"SQLite's quick_check reports: {first[:100]}")


def require_write_transaction(conn: sqlite3.Connection, helper: str) -> None:
    """Refuse to write outside :func:`transaction`: each statement would commit on its own.

    That is the very bug 04_rollback takes apart, so the ``_txn`` helpers that write check
    it instead of trusting their name.
    """
    if not (isinstance(conn, LabConnection) and conn.in_write_transaction and conn.in_transaction):
        raise NotInTransaction(helper)


def holds_write_lock(conn: sqlite3.Connection | None) -> bool:
    return isinstance(conn, LabConnection) and conn.in_write_transaction and conn.in_transaction


def set_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to write-ahead logging, waiting for other openers like any writer.

    Changing the journal mode needs every other connection out of the way, and SQLite
    answers "database is locked" at once instead of calling the busy handler; so wait
    here, up to the same busy timeout.
    """
    deadline = time.monotonic() + busy_timeout_ms() / 1000
    delay = 0.002
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                raise DatabaseUnavailable(str(getattr(conn, "path", "?")), f"SQLite kept journal mode {mode!r} instead of WAL")
            return
        except sqlite3.OperationalError as error:
            if _primary(error) not in (SQLITE_BUSY, SQLITE_LOCKED) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _primary(error: sqlite3.Error) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def translate(error: sqlite3.Error, path: str | Path) -> LabError:
    """The labkit error for a SQLite error, decided by SQLite's result code.

    Damage is bad input (exit 2: retrying cannot mend a file); a lock, a full disk or an
    I/O error is a run-time failure (exit 1: the same command may work later).
    """
    where = str(path)
    primary = _primary(error)
    if primary == SQLITE_NOTADB:
        return NotADatabase(where, f"SQLite reports: {error}")
    if primary == SQLITE_CORRUPT:
        return DatabaseDamaged(where, str(error))
    if primary == SQLITE_CONSTRAINT:
        return RuleViolation(where, str(error))
    if primary == SQLITE_FULL or (primary == SQLITE_IOERR and _disk_is_full(Path(where))):
        return DatabaseUnavailable(where, f"the disk is full ({error})")
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        waited = busy_timeout_ms() / 1000
        return DatabaseUnavailable(where, f"another process held the write lock for over {waited:g} s ({error})")
    if primary in (SQLITE_READONLY, SQLITE_CANTOPEN) and (why := _why_not_writable(Path(where))):
        return DatabaseUnavailable(where, f"{why} ({error})")
    if primary == SQLITE_READONLY:
        return DatabaseUnavailable(where, f"the file or its folder is read-only ({error})")
    if primary == SQLITE_CANTOPEN:
        return DatabaseUnavailable(where, f"SQLite cannot open it or its sidecar files ({error})")
    return DatabaseUnavailable(where, str(error))


def _why_not_writable(path: Path) -> str | None:
    """Ask the operating system whether the file can be opened for writing (nothing is written)."""
    if held_open_here(path):
        return None  # opening and closing it would drop an open connection's locks
    try:
        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW))
    except OSError as error:
        if error.errno == errno.EROFS:
            return "it is on a read-only file system"
        if error.errno in (errno.EACCES, errno.EPERM):
            return "this user may not write it"
    return None


def _disk_is_full(path: Path) -> bool:
    """SQLite reports some failed writes as a plain I/O error; ask the file system why."""
    try:
        usage = os.statvfs(path.parent if str(path.parent) else ".")
    except OSError:
        return False
    return usage.f_bavail * usage.f_frsize < 64 * 1024


def open_regular_file(path: Path, flags: int, what: str, *, follow_symlinks: bool = False, mode: int = 0o644) -> int:
    """``os.open`` that never blocks on a FIFO or a device, and by default never follows a symlink.

    Returns the descriptor of a regular file, or raises ``NotARegularFile`` naming
    ``what`` the file is for. A file labkit writes to is never reached through a symlink
    (the write would land wherever the link points); a file it only reads may be.
    ``O_NONBLOCK`` matters only for the open itself: on a regular file it changes
    nothing afterwards.
    """
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | nofollow | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            reason = "it is a symbolic link loop" if follow_symlinks else "it is a symbolic link"
            raise NotARegularFile(what, str(path), reason) from None
        if error.errno == errno.ENXIO:  # a FIFO with no reader, opened for writing
            raise NotARegularFile(what, str(path), "it is not a regular file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(what, str(path), "it is not a regular file")
    return fd
