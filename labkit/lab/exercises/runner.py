"""What every lesson's check shares: running a learner's answer for real, and saying what went wrong.

A learner answers a "build" exercise by writing one function in a notebook cell. A check
does not read the code: it runs it, here in fresh child processes (:func:`run_answer_once`,
:func:`run_answer` for a race), or in this kernel against a fresh database
(:func:`new_trial`, :func:`killed_at`), against the events its lesson is about.

How a function gets into a child: its source (``inspect.getsource``) is run there in a
namespace that holds labkit and the helpers a lesson names (:data:`ANSWER_NAMESPACE`),
so an answer may use those and its own arguments, nothing else from the notebook. Hooks
wrap some helpers in that namespace (:data:`HOOKABLE`): ``kill_before="advance_txn"``
sends SIGKILL when the answer calls ``advance_txn``, ``pause_before=...`` holds it there
like ``--pause-at``.

The feedback: a check wrapped in :func:`one_line` raises ``AssertionError`` shown as one
line; :func:`waiting_for` is the blank answer's; :func:`answer_is_a_function`,
:func:`source_of` and :func:`own_work` refuse what is not the learner's own function.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import json
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import textwrap
import threading
import types
from collections.abc import Callable, Collection, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import labkit

from ...children import in_child
from ...clock import clock_from_env
from ...crashpoints import wait_for_a_line
from ...database import holds_write_lock, read_transaction
from ...store import latest_time_txn, snapshot
from ..processes import ChildOutcome, child_env
from ..workspace import Workspace

#: The names an answer may use without importing them (it may also import from labkit).
ANSWER_NAMESPACE = (
    "labkit", "sqlite3", "closing",
    "transaction", "read_transaction",
    "find_run_txn", "create_run_txn", "advance_txn", "store_evidence_txn", "load_evidence_txn",
    "find_receipt_txn", "issue_receipt_txn", "build_report", "check_evidence", "CONTRACT", "Step",
)

#: The helpers a hook can stop at, and the module that defines each.
HOOKABLE = {
    "transaction": "labkit.database",
    "advance_txn": "labkit.store",
    "store_evidence_txn": "labkit.store",
    "issue_receipt_txn": "labkit.receipts",
}


# --------------------------------------------------------------------------- feedback


def one_line(check: Callable) -> Callable:
    """Show a check's feedback in Jupyter as one line, not as a traceback into labkit.

    The feedback is an ``AssertionError`` like any other (nbval compares its name and
    message); only its display is shortened, through IPython's ``_render_traceback_``.
    """

    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except AssertionError as error:
            shown = f"AssertionError: {error}"
            error._render_traceback_ = lambda: [shown]  # type: ignore[attr-defined]
            raise

    return checked


@one_line
def waiting_for(exercise: str, **answers: object) -> None:
    """Raise the blank-answer feedback if any answer is still ``None``."""
    blank = [name for name, value in answers.items() if value is None]
    if blank:
        names = " and ".join(f"`{name}`" for name in blank)
        raise AssertionError(
            f"✏️ Exercise {exercise} is waiting for your answer: set {names} in the cell above, run it, then run this cell again."
        )


def answer_is_a_function(answer: object, shape: str = "def ...") -> None:
    """Refuse an answer that is not callable; ``shape`` shows the ``def`` line the exercise asks for."""
    if not callable(answer):
        raise AssertionError(f"the answer should be a function ({shape}), not {type(answer).__name__}")


def source_of(function: Callable) -> str:
    """The source of a function a learner wrote in a notebook cell."""
    answer_is_a_function(function)
    try:
        return textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        raise AssertionError(
            "the check cannot read this function's source: define it with `def` in a notebook cell, "
            "not with lambda or exec"
        ) from None


def names_used(function: Callable, *, imported: bool = False) -> set[str]:
    """The names and attributes in a learner's function's code (not in its comments or strings).

    With ``imported``, also the names it imports with ``from ... import``.
    """
    try:
        tree = ast.parse(source_of(function))
    except SyntaxError:  # a lambda inside a larger statement: its line is not a whole statement
        return set()  # the identity checks of own_work still apply; nothing here can be read by name
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    if imported:
        used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    return used


def labkit_objects(*names: str) -> dict[int, str]:
    """Every object labkit's loaded modules hold under one of ``names``: id -> ``module.name``.

    What a check compares with, found by value: the same function or constant is refused
    whatever the learner calls it, and a lesson names it once, by its labkit name.
    """
    found: dict[int, str] = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "labkit" or module_name.startswith("labkit.")):
            continue
        for name in names:
            value = getattr(module, name, None)
            if value is not None and not isinstance(value, (int, float, bool)):
                found.setdefault(id(value), f"{getattr(value, '__module__', module_name) or module_name}.{name}")
    return found


def _unwrapped(value: object) -> list[object]:
    """``value`` and what it wraps: ``functools.partial``'s function, a decorator's ``__wrapped__``, a bound method's."""
    seen: list[object] = []
    while value is not None and all(value is not other for other in seen) and len(seen) < 20:
        seen.append(value)
        value = getattr(value, "func", None) or getattr(value, "__wrapped__", None) or getattr(value, "__func__", None)
    return seen


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    """A function's code and every code object nested in it (inner functions, comprehensions, lambdas)."""
    nested = [const for const in code.co_consts if isinstance(const, types.CodeType)]
    return [code, *[inner for const in nested for inner in _code_objects(const)]]


def _reachable(function: object, depth: int = 4) -> list[tuple[str, object]]:
    """(how it is reached, value) for everything an answer can call or read without naming it in labkit's words.

    The answer itself; what its code's names point to in its globals (a notebook's
    ``my_rule = labkit.versioning.why_not``, ``from labkit.versioning import why_not as w``);
    its closure cells and default arguments; and, through the learner's own helper functions,
    what theirs point to, a few calls deep.
    """
    found: list[tuple[str, object]] = []
    todo: list[tuple[str, object, int]] = [("your answer", function, 0)]
    visited: set[int] = set()
    while todo:
        how, value, level = todo.pop()
        for layer in _unwrapped(value):
            if id(layer) in visited:
                continue
            visited.add(id(layer))
            found.append((how, layer))
            code = getattr(layer, "__code__", None)
            if not isinstance(code, types.CodeType) or level >= depth:
                continue
            if str(getattr(layer, "__module__", "") or "").startswith("labkit"):
                continue  # labkit's own code calls labkit freely; only the learner's code is followed
            namespace = getattr(layer, "__globals__", {}) or {}
            for inner in _code_objects(code):
                for name in inner.co_names:
                    if name in namespace:
                        todo.append((f"`{name}`", namespace[name], level + 1))
            for cell in getattr(layer, "__closure__", None) or ():
                try:
                    todo.append(("a closure", cell.cell_contents, level + 1))
                except ValueError:  # an empty cell
                    continue
            for default in (getattr(layer, "__defaults__", None) or ()) + tuple((getattr(layer, "__kwdefaults__", None) or {}).values()):
                todo.append(("a default argument", default, level + 1))
    return found


def _copied_from_labkit(function: object, code: types.CodeType) -> bool:
    """Whether ``function`` runs code written in labkit's files without being the function labkit defined.

    ``types.FunctionType(labkit_fn.__code__, globals())`` makes a new function, not labkit's
    by identity or module, that is still labkit's code line for line.
    """
    package = str(Path(labkit.__file__).resolve().parent)
    try:
        inside = str(Path(code.co_filename).resolve()).startswith(package)
    except (OSError, ValueError):
        return False
    if not inside:
        return False
    module = sys.modules.get(str(getattr(function, "__module__", "") or ""))
    owner: object = module
    for part in str(getattr(function, "__qualname__", "") or "").split("."):
        if part == "<locals>":
            return False  # a labkit closure (a decorator's wrapper, say): not one a notebook copies by name
        owner = getattr(owner, part, None)
        if owner is None:
            return True  # labkit's code under a module that does not define it: a copy
    return owner is not function and getattr(owner, "__func__", None) is not function


def own_work(function: object, *names: str) -> None:
    """Refuse an answer that hands the exercise to the labkit code the check compares with.

    ``names`` are labkit's names for it (functions and constants). The answer is refused
    when it *is* one of them, or any labkit function at all (compared by identity and
    module, not by the name the learner gave it), when its code names one (as a name, an
    attribute or an import; comments and strings do not count), or when what its code
    refers to (its globals, closure, defaults, and the learner's own helpers' in turn) is
    one of them under any other name. :func:`watching_labkit` catches what is only built at
    run time (``getattr`` with a computed name).
    """
    targets = labkit_objects(*names)
    for how, value in _reachable(function):
        if id(value) in targets:
            where = "your answer is" if how == "your answer" else f"your answer reaches it through {how}:"
            raise AssertionError(
                f"write it yourself: {where} labkit's own {targets[id(value)]}, which already does the job "
                "(and is what the check compares with)"
            )
        code = getattr(value, "__code__", None)
        if isinstance(code, types.CodeType) and _copied_from_labkit(value, code):
            raise AssertionError(
                f"write it yourself: {'your answer' if how == 'your answer' else how} runs labkit's own code "
                f"({code.co_name}, copied into a new function), not yours"
            )
        if how == "your answer" and callable(value) and str(getattr(value, "__module__", "") or "").startswith("labkit"):
            raise AssertionError(
                f"write it yourself: your answer is labkit's own {value.__module__}.{getattr(value, '__name__', '?')}, "
                "not a function of yours"
            )
    if callable(function) and isinstance(getattr(function, "__code__", None), types.CodeType):
        used = names_used(function, imported=True)
        handed_over = [name for name in names if name in used]
        if handed_over:
            raise AssertionError(
                f"write it yourself with the store's helpers: your answer calls {handed_over[0]}, which already does the job "
                "(and is what the check compares with)"
            )


@contextlib.contextmanager
def watching_labkit(*names: str) -> Iterator[list[str]]:
    """While the check calls an answer in this process, notice any call of labkit's ``names`` from outside labkit.

    Each function labkit's modules hold under one of ``names`` is replaced, for the duration,
    by one that records a call made from code outside the labkit package (the learner's),
    then does what the original does: labkit's own code calling it is not counted, and the
    answer's behaviour does not change. Yields the list of calls; :func:`refuse_if_called`
    turns it into the feedback once the answer has returned.
    """
    package = str(Path(labkit.__file__).resolve().parent)
    calls: list[str] = []
    replaced: list[tuple[types.ModuleType, str, object]] = []

    def recorder(original: Callable, label: str) -> Callable:
        @functools.wraps(original)
        def recorded(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if not str(Path(caller).resolve()).startswith(package):
                calls.append(label)
            return original(*args, **kwargs)

        return recorded

    targets = labkit_objects(*names)
    codes: dict[types.CodeType, str] = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "labkit" or module_name.startswith("labkit.")):
            continue
        for attribute, value in list(vars(module).items()):
            if id(value) in targets and inspect.isfunction(value):
                codes[value.__code__] = targets[id(value)]
                replaced.append((module, attribute, value))
                setattr(module, attribute, recorder(value, targets[id(value)]))
    checks = str(Path(__file__).resolve().parent)
    outside: dict[str, bool] = {}

    def is_outside(filename: str) -> bool:
        if filename not in outside:
            outside[filename] = not str(Path(filename).resolve()).startswith(package)
        return outside[filename]

    def profiler(frame: types.FrameType, event: str, arg: object) -> None:
        # The same code, however it was reached: kept in a dict or a class before the check
        # replaced the module's name, or a check's own helper (the answer it compares with).
        if event != "call":
            return
        code = frame.f_code
        label = codes.get(code)
        if (label is None and code.co_filename.startswith(checks) and code.co_filename != __file__
                and "<" not in getattr(code, "co_qualname", code.co_name)):  # a check's named helper, not a callback it hands to SQLite
            label = f"{Path(code.co_filename).stem}.{code.co_name} (the check's own code)"
        if label is not None and frame.f_back is not None and is_outside(frame.f_back.f_code.co_filename):
            calls.append(label)

    previous = sys.getprofile()
    sys.setprofile(profiler)
    threading.setprofile(profiler)
    try:
        yield calls
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)
        for module, attribute, value in replaced:
            setattr(module, attribute, value)


def refuse_if_called(calls: list[str]) -> None:
    """The feedback of :func:`watching_labkit`: the answer called labkit's own code, under whatever name."""
    if calls:
        raise AssertionError(
            f"write it yourself: your answer called labkit's own {calls[0]} (found while it ran), "
            "which already does the job (and is what the check compares with)"
        )


def none_wrong(wrong: list[str]) -> None:
    """Fail with the first three of ``wrong`` (what went wrong at each crash point), and how many more."""
    assert not wrong, "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")


def tables_of(space: Workspace) -> dict:
    """Every table's rows in ``space``'s database (:func:`labkit.store.snapshot`), to compare before and after."""
    with closing(space.connect()) as conn:
        return snapshot(conn)


def changed_tables(before: dict, after: dict, apart_from: Collection[str]) -> tuple[str, ...]:
    """The tables of two :func:`tables_of` whose rows differ, leaving out those the operation may change."""
    return tuple(table for table in before if table not in apart_from and before[table] != after[table])


# --------------------------------------------------------------------------- running an answer in a child


def run_answer(
    function: Callable,
    kind: str,
    db: Path,
    incident: str,
    *,
    kill_before: str | None = None,
    pause_before: str | None = None,
) -> tuple[str, list[str]]:
    """(how to show it, argv) of a child process that runs ``function`` as an answer of ``kind``.

    ``kind`` says how the child calls it: ``"inspect"`` as ``f(conn, provider, incident,
    clock)``, ``"complete"`` as ``f(conn, incident, clock)``, ``"resume"`` as ``f(conn,
    provider, incident, clock)``.
    """
    for hook in (kill_before, pause_before):
        if hook is not None and hook not in HOOKABLE:
            raise ValueError(f"cannot hook {hook!r}; hookable: {', '.join(HOOKABLE)}")
    spec = {
        "source": source_of(function),
        "function": function.__name__,
        "kind": kind,
        "db": str(db),
        "incident": incident,
        "kill_before": kill_before,
        "pause_before": pause_before,
    }
    spec_path = db.with_name(f"answer-{os.getpid()}-{len(list(db.parent.glob('answer-*.json')))}.json")
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    argv = [sys.executable, "-c", "from labkit.lab.exercises.runner import child_main; child_main()", str(spec_path)]
    hooks = f" (killed before {kill_before})" if kill_before else ""
    return f"your {function.__name__}() on {incident}{hooks}", argv


def run_answer_once(function: Callable, kind: str, db: Path, incident: str, **hooks: str | None) -> ChildOutcome:
    """Run the answer in one child process to its end (or its kill).

    The child is forked from this process instead of started as a new interpreter: it builds
    the same fresh namespace and hooks as :func:`child_main` and is just as much a process of
    its own, which a hook's SIGKILL ends, but it skips the 0.14 s a new Python
    spends importing labkit and this module, and a check runs an answer up to seven times a try. Its output
    goes to files, not pipes, so an answer that prints a lot cannot block it. (Races need
    children released one by one on their standard input: :func:`race_commands` starts those.)
    """
    shown, argv = run_answer(function, kind, db, incident, **hooks)
    spec_path = Path(argv[-1])
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    out, err = spec_path.with_suffix(".out"), spec_path.with_suffix(".err")
    environment = child_env()

    def answer() -> None:  # pragma: no cover - the child
        os.environ.clear()
        os.environ.update(environment)  # the pinned clock, as a started child would get it
        sys.exit(_answer_main(spec))

    end = in_child(answer, output=(out, err))
    return ChildOutcome(shown, end.code if end.code is not None else 1, out.read_text(encoding="utf-8", errors="replace"),
                        err.read_text(encoding="utf-8", errors="replace"))


def labkit_cli_forked(*args: str | Path) -> ChildOutcome:
    """``labkit ARGS`` (``labkit.cli.main``) in a child forked from this process, to its end or its kill.

    What :func:`~labkit.lab.processes.labkit_cli` does for a check's own preparations (a run
    killed at a crash point, a recovery), without a new interpreter: the child is a process of
    its own, with the environment a started child gets (the pinned clock), and an armed crash
    point SIGKILLs it for real; it only skips the 0.14 s a new Python spends
    importing labkit and this module. For a database that this process holds no connection to (a trial made
    for the check): a forked SQLite must not share a file with its parent's open connections.
    """
    words = [str(a) for a in args]
    environment = child_env()

    def command() -> None:  # pragma: no cover - the child
        import labkit.cli

        os.environ.clear()
        os.environ.update(environment)
        sys.exit(labkit.cli.main(words))

    with tempfile.TemporaryDirectory(prefix="labkit-check-") as folder:
        out, err = Path(folder) / "out", Path(folder) / "err"
        end = in_child(command, output=(out, err))
        printed = out.read_text(encoding="utf-8", errors="replace")
        said = err.read_text(encoding="utf-8", errors="replace")
    shown = "labkit " + " ".join(Path(w).name if os.sep in w else w for w in words)
    return ChildOutcome(shown, end.code if end.code is not None else 1, printed, said or end.error)


def child_main() -> None:  # pragma: no cover - runs in the child process
    """The child's side of :func:`run_answer`, started as a new interpreter (races)."""
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    sys.exit(_answer_main(spec))


def _answer_main(spec: dict[str, Any]) -> int:  # pragma: no cover - runs in the child process
    """Run the learner's answer as ``spec`` says; print ``returned ...``, or its error on stderr (exit 1)."""
    namespace: dict[str, Any] = {"__name__": "answer"}
    modules = ("labkit", "labkit.store", "labkit.receipts", "labkit.database", "labkit.contract", "labkit.steps", "labkit.report")
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name in ANSWER_NAMESPACE:
            if hasattr(module, name) and name not in namespace:
                namespace[name] = getattr(module, name)
    namespace.update({"labkit": labkit, "sqlite3": sqlite3, "closing": closing})

    def hooked(name: str, original: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            if name == spec["kill_before"]:
                os.kill(os.getpid(), signal.SIGKILL)
            if name == spec["pause_before"]:
                conn = args[0] if args else None
                holding = "holding the write lock" if holds_write_lock(conn) else "holding no lock"
                print(f"paused at {name} ({holding})", flush=True)
                wait_for_a_line()
            return original(*args, **kwargs)

        return wrapper

    for name, module_name in HOOKABLE.items():
        if name in (spec["kill_before"], spec["pause_before"]):
            module = importlib.import_module(module_name)
            wrapped = hooked(name, getattr(module, name))
            namespace[name] = wrapped
            setattr(module, name, wrapped)  # for an answer that writes labkit.store.advance_txn(...)
    try:
        exec(compile(spec["source"], "<your answer>", "exec"), namespace)
        function = namespace[spec["function"]]
        db = Path(spec["db"])
        conn = labkit.connect(db)
        with read_transaction(conn):
            latest = latest_time_txn(conn)
        clock = clock_from_env(after=latest)
        provider = labkit.ReferenceProvider(labkit.call_log_for(db))
        incident = spec["incident"]
        if spec["kind"] in ("inspect", "resume"):
            returned = function(conn, provider, incident, clock)
        elif spec["kind"] == "complete":
            returned = function(conn, incident, clock)
        else:
            raise ValueError(f"unknown kind {spec['kind']!r}")
        shown = getattr(returned, "receipt_id", None) or (None if returned is None else repr(returned)[:80])
        print(f"returned {shown}", flush=True)
    except Exception as error:  # the learner's error, reported to the check as one line
        print(f"{type(error).__name__}: {error}".splitlines()[0][:300], file=sys.stderr, flush=True)
        return 1
    return 0


def returned_value(outcome: ChildOutcome) -> str | None:
    """What the answer returned in a child (its ``returned ...`` line), None if it returned None or nothing."""
    for line in outcome.stdout.splitlines():
        if line.startswith("returned "):
            value = line[len("returned "):]
            return None if value == "None" else value
    return None


# --------------------------------------------------------------------------- trial workspaces


_TRIALS: list[Workspace] = []


def new_trial(name: str) -> Workspace:
    """A scratch workspace for one check; removed by the next check, passed or failed, or at exit."""
    trial = Workspace.create(name)
    _TRIALS.append(trial)
    return trial


def clear_trials() -> None:
    """Remove the workspaces of the previous check (each check starts with this)."""
    while _TRIALS:
        shutil.rmtree(_TRIALS.pop().folder, ignore_errors=True)


#: (workspace name, incident, crash point) -> a workspace where a child was SIGKILLed there.
_KILLED: dict[tuple[str, str, str], Workspace] = {}


def killed_at(name: str, incident: str, point: str) -> Workspace:
    """A trial workspace holding what a child killed at ``point`` left behind.

    The child really runs and really dies, once per crash point in this kernel; every later
    try of the check gets a copy of the files it left (the database, its write-ahead log, the
    provider's log), which are the same bytes it would leave again: the clock is pinned. A
    learner re-running a check waits for their own answer, not for seven kills.
    """
    key = (name, incident, point)
    original = _KILLED.get(key)
    if original is None or not original.db.exists():
        original = Workspace.create(name)
        child = labkit_cli_forked("run", "--db", original.db, "--incident", incident, "--crash-at", point)
        assert child.killed_by == "SIGKILL", f"the child armed at {point} was not killed: {child.status}"
        _KILLED[key] = original
    trial = new_trial(name)
    # The -shm file is left out on purpose: SQLite rebuilds it from the log on the first open.
    for source, target in ((original.db, trial.db), (Path(f"{original.db}-wal"), Path(f"{trial.db}-wal")),
                           (original.call_log, trial.call_log)):
        if source.exists():
            shutil.copyfile(source, target)
    return trial
