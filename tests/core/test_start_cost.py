"""Starting a run asks one file, not the data folder, and reads the run once under the write lock.

- ReferenceProvider.knows gives the answer ``incident in incidents()`` gives, for every shipped
  incident and for names that are not one (a path, a pattern, a file name, empty);
- the coordinator's start of a new run never lists the folder (an unknown id still does, to say
  how many there are), and an adapter without ``knows`` is still asked through ``incidents()``;
- under the write lock a new run costs one INSERT (no SELECT before it), and starting a run that
  exists reads it and writes nothing.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit.database import transaction
from labkit.errors import UnknownIncident
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
