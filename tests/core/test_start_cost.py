"""Starting a run asks one file, not the data folder, and reads the run once under the write lock.

- ReferenceProvider.knows gives the answer ``incident in incidents()`` gives, for every shipped
  incident and for names that are not one (a path, a pattern, a file name, empty);
- the coordinator's start of a new run never lists the folder (an unknown id still does, to say
  how many there are), and an adapter without ``knows`` is still asked through ``incidents()``;
- under the write lock a new run costs one INSERT (no SELECT before it), and starting a run that
  exists reads it and writes nothing.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit.database import transaction
from labkit.errors import UnknownIncident
from labkit.lab.processes import child_env
from labkit.provider import ReferenceProvider, knows, list_incidents
from labkit.store import create_run_txn, snapshot


class CountingProvider(ReferenceProvider):
    """The real provider, counting how often it lists its incidents."""

    listings = 0

    def incidents(self) -> list[str]:
        self.listings += 1
        return super().incidents()


class NoKnows:
    """An adapter with only the protocol's two methods."""

    def __init__(self, inner: ReferenceProvider):
        self.inner = inner

    def incidents(self) -> list[str]:
        return self.inner.incidents()

    def read(self, incident: str) -> bytes:
        return self.inner.read(incident)


NOT_INCIDENTS = ["", "INC-0000", "INC-1001.json", "INC-*", "../incidents/INC-1001", "incidents/INC-1001", "inc-1001", "INC-1001\0"]


def test_knows_answers_as_the_listing_does(tmp_path: Path):
    provider = ReferenceProvider(tmp_path / "calls.jsonl")
    listed = provider.incidents()
    assert listed == list_incidents()
    for name in [*listed, *NOT_INCIDENTS]:
        assert provider.knows(name) == (name in listed) == knows(provider, name) == knows(NoKnows(provider), name), name


def test_starting_a_new_run_lists_nothing_and_an_unknown_one_says_how_many(tmp_path: Path):
    db = tmp_path / "lab.db"
    provider = CountingProvider(labkit.call_log_for(db))
    with closing(labkit.connect(db)) as conn:
        coordinator = labkit.Coordinator(conn, provider)
        coordinator.start("INC-1001")
        assert provider.listings == 0
        with pytest.raises(UnknownIncident) as refused:
            coordinator.start("INC-0000")
        assert provider.listings == 1 and str(len(list_incidents())) in str(refused.value)
        labkit.Coordinator(conn, NoKnows(provider)).start("INC-1002")  # an adapter without knows still works
        assert [run.incident for run in labkit.store.list_runs_txn(conn)] == ["INC-1001", "INC-1002"]


def test_a_new_run_is_one_insert_under_the_lock_and_an_existing_one_is_read_not_written(tmp_path: Path):
    db = tmp_path / "lab.db"
    with closing(labkit.connect(db)) as conn:
        traced: list[str] = []
        clock = labkit.ManualClock("2026-01-01T00:00:00Z")
        with transaction(conn):
            conn.set_trace_callback(traced.append)
            created = create_run_txn(conn, "INC-1001", 2, clock)
            conn.set_trace_callback(None)
        assert not [s for s in traced if s.startswith("SELECT")], traced
        assert [s.split(" (")[0] for s in traced if s.startswith("INSERT")] == ["INSERT INTO runs", "INSERT INTO transitions"]
        before = snapshot(conn)
        clock.advance(60)
        with transaction(conn):
            again = create_run_txn(conn, "INC-1001", 1, clock)  # another version asks: it gets the stored row
        assert again == created and snapshot(conn) == before


# `python -m labkit run` as a lesson's or a test's child runs it, then the modules it loaded.
_LOADED = """
import sys
from labkit.__main__ import main
code = main(sys.argv[1:])
print(code, *sorted(name for name in sys.modules if name.partition(".")[0] in ("jsonschema", "http", "asyncio", "labkit")))
"""
#: What a run without --tickets never needs: each is a noticeable part of a child's start-up
#: (jsonschema names a refusal's rule; the rest belong to other commands).
NOT_FOR_A_RUN = {"jsonschema", "http.client", "asyncio", "labkit.engines", "labkit.pool", "labkit.evaluation", "labkit.retention",
                 "labkit.lab.workspace", "labkit.lab.ticket_service", "labkit.lab.bench", "labkit.lab.explorer"}


def _loaded(*args: str | Path) -> tuple[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", _LOADED, *map(str, args)], capture_output=True, text=True, env=child_env(), timeout=120)
    code, *names = done.stdout.splitlines()[-1].split()  # the command's own lines come first
    return code, set(names)


def test_a_run_child_loads_the_workflow_and_nothing_another_command_needs(tmp_path: Path):
    code, loaded = _loaded("run", "--db", tmp_path / "lab.db", "--incident", "INC-1001")
    assert code == "0" and {"labkit.coordinator", "labkit.contract", "labkit.store"} <= loaded
    assert not loaded & NOT_FOR_A_RUN, sorted(loaded & NOT_FOR_A_RUN)
    # The check sees a module where one is loaded: explore's help names the Temporal engine's bugs.
    assert {"labkit.engines", "asyncio"} <= _loaded("explore", "--db-dir", tmp_path / "x", "--random", "-1")[1]
