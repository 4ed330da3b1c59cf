"""Strict nbval over notebooks/: a lesson needing a SQLite feature this Python's SQLite lacks is SKIPPED.

labkit.lab.sqlite_check probes each feature the lessons use (for example DBOS's unixepoch('subsec'),
which lesson 14 needs on Python 3.12 and later and SQLite before 3.42 answers with NULL). Such a
lesson's cells are reported as skipped with that check's one line (the feature, the SQLite found,
what to do): not failed eight cells deep, and not silently passed. 00_setup_check, which checks every
feature, is skipped too where one is missing. Where every feature is there, nothing changes.
"""

from __future__ import annotations

import os

import pytest

# Lesson 07's optional live RabbitMQ is replayed from its capture in the suites' own runs of the lessons (nbval,
# Run All again, the skipped-cell reruns, the exercise checks): each would boot a node, about 20 s, where
# rabbitmq-server is installed. make test-broker runs that lesson's cells on a live node
# (tests/broker/test_live_broker.py); LABKIT_LIVE_BROKER=1 here runs them live everywhere.
os.environ.setdefault("LABKIT_LIVE_BROKER", "0")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-all-again", action="store_true",
        help="after nbval's run of a notebook, run every cell again in the same kernel (RunAllAgain)",
    )


class RunAllAgain(pytest.Item):
    """Run All again in the kernel nbval just ran the notebook in, as a learner who starts over does.

    Every code cell runs a second time, with everything after it already run; each must succeed,
    or raise the error it is tagged to raise, the one the committed notebook shows. nbval's own
    pass is the first Run All, so the lessons are not run an extra time to get there.
    """

    def runtest(self) -> None:
        from queue import Empty

        kernel = self.parent.kernel  # type: ignore[union-attr]
        if kernel is None or not kernel.is_alive():
            raise RuntimeError("the notebook's kernel is not running: nbval's pass did not finish")
        timeout = self.config.option.nbval_cell_timeout
        problems = []
        for number, cell in enumerate(c for c in self.parent.nb.cells if c.cell_type == "code"):  # type: ignore[union-attr]
            if not cell.source.strip():
                continue
            msg_id = kernel.execute_cell_input(cell.source, allow_stdin=False)
            while True:  # the execute_reply on the shell channel: the cell has finished
                reply = kernel.get_message(stream="shell", timeout=timeout)
                if reply["parent_header"].get("msg_id") == msg_id:
                    break
            while True:  # what the cell displayed is not compared here: drop it
                try:
                    kernel.get_message(stream="iopub", timeout=0)
                except Empty:
                    break
            content = reply["content"]
            raised = content.get("ename") if content["status"] == "error" else None
            committed = next((o["ename"] for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
            tagged = "raises-exception" in cell.metadata.get("tags", [])
            if raised != (committed if tagged else None):
                problems.append(f"Cell {number}: raised {raised or 'nothing'}; "
                                f"{'tagged to raise ' + str(committed) if tagged else 'not tagged to raise'}")
        assert problems == [], "Run All again, in the same kernel:\n" + "\n".join(problems)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: Run All again"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-all-again", default=False):
        last_of: dict[object, int] = {}
        for position, item in enumerate(items):
            if item.path.suffix == ".ipynb" and hasattr(item.parent, "kernel"):
                last_of[item.parent] = position
        for parent, position in sorted(last_of.items(), key=lambda pair: -pair[1]):
            items.insert(position + 1, RunAllAgain.from_parent(parent, name="Run All again"))
    lessons = {item.path.name[:2] for item in items if item.path.suffix == ".ipynb" and item.path.name[:2].isdigit()}
    if not lessons:
        return
    from labkit.lab import sqlite_check

    reasons = {lesson: sqlite_check.problems(None if lesson == "00" else lesson) for lesson in lessons}
    for item in items:
        found = reasons.get(item.path.name[:2]) if item.path.suffix == ".ipynb" else None
        if found:
            item.add_marker(pytest.mark.skip(reason=found[0]))


def _kernel_start_with_retries() -> None:
    """nbval starts a kernel per notebook; let a kernel that died at birth be started again, twice.

    A kernel is told its five ports in a file written before it starts; jupyter_client finds free
    ports by binding and releasing them, and on a machine where many kernels start at once (the
    unit tests run notebooks too, beside nbval) another process can take one in between, and the
    new kernel dies before it says hello ("Kernel died before replying to kernel_info": seen once in
    a CI run, on one notebook of fifteen). That is the harness failing to start, not a lesson
    failing: each retry is printed, and a kernel that dies three times still fails the notebook.
    """
    import nbval.kernel

    original = nbval.kernel.start_new_kernel

    def start_new_kernel(*args, **kwargs):
        for attempt in (1, 2, 3):
            try:
                return original(*args, **kwargs)
            except RuntimeError as error:
                if attempt == 3 or "died before replying" not in str(error):
                    raise
                print(f"\nnbval: a kernel died while starting ({error}); starting another (attempt {attempt + 1} of 3)")
        raise AssertionError("unreachable")

    nbval.kernel.start_new_kernel = start_new_kernel


_kernel_start_with_retries()
