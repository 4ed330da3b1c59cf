"""The DBOS engine with its system database on a real PostgreSQL server: the contract suite, and two workers.

The server is the one LABKIT_DBOS_POSTGRES_URL names (``make test-postgres`` starts a
throwaway one on 127.0.0.1 with ``scripts/postgres.sh`` and sets it); each test makes a
database of its own there and drops it afterwards, so its user needs CREATEDB. Without the
variable these tests are skipped with the reason (``-rs`` prints it), so ``make test`` runs
them only where a server is configured. In CI (CI set) a run that names this file and has no
server fails instead: there the PostgreSQL path is the point, and a skip would pass unseen.

The bad-URL tests need no server and always run.
"""

from __future__ import annotations

import pytest

from labkit.crashpoints import points
from labkit.engines.dbos import POSTGRES_ENV
from labkit.errors import BadInput
from labkit.lab.explorer import FLOW_INVARIANTS, Scenario, run_scenario
from labkit.lab.postgres_workers import PostgresServerUnusable, fresh_database, two_workers, workflow_rows

NO_SERVER = f"no PostgreSQL server configured: set {POSTGRES_ENV}=postgresql://USER@HOST:PORT/DB (see README)"


@pytest.fixture
def server(live_service_url) -> str:
    """The PostgreSQL server's URL; skipped with the reason when none is configured (failed, in CI, when asked for)."""
    return live_service_url(POSTGRES_ENV, NO_SERVER)


@pytest.fixture
def system_url(server: str):
    """A fresh, empty database on the server for this test's DBOS system tables; dropped afterwards."""
    with fresh_database(server) as url:
        yield url


# --------------------------------------------------------------------------- the contract suite, on PostgreSQL


@pytest.mark.parametrize("point", points(tickets=True))
def test_a_dbos_run_killed_at_each_point_on_postgres_keeps_every_invariant(point, system_url, tmp_path):
    """The explorer's ticketed run flow on DBOS, its system database on the server: killed at ``point``, recovered, judged."""
    result = run_scenario(Scenario("run", (point,), None, "dbos", system_url=system_url), tmp_path / "scenario")
    assert result.reached == (True,), f"the run was never killed at {point}: {result.ends}"
    assert result.held, result.broken
    assert all(result.invariants[number] for number in FLOW_INVARIANTS["run"])
    assert (result.receipts, result.tickets, result.completed) == (1, 1, True)
    assert result.provider_reads == (2 if point == "after_read" else 1)
    # The run really went through the server: DBOS's own row for it is there, finished after a recovery.
    [row] = workflow_rows(system_url)
    assert (row["workflow_id"], row["status"]) == ("INC-1003", "SUCCESS")
    assert row["attempts"] >= 2, row


# --------------------------------------------------------------------------- two workers, one killed


@pytest.mark.parametrize("kill_at", ["after_read", "after_evidence_commit", "before_send", "after_send"])
def test_a_live_worker_finishes_what_a_killed_worker_left(kill_at, system_url, tmp_path):
    """Worker A is killed at ``kill_at`` in its last workflow while worker B runs; B takes A's workflow over and ends it."""
    result = two_workers(tmp_path / "two", system_url, kill_at=kill_at)
    assert result.held, result.text()
    assert result.a_end.killed and result.b_end.code == 0
    assert result.overlap_seconds > 0, "the two workers never ran at the same time"
    assert result.recovered == (result.killed_incident,)
    by_id = {row["workflow_id"]: row for row in result.workflows}
    assert {row["status"] for row in by_id.values()} == {"SUCCESS"}
    assert by_id[result.killed_incident]["executor_id"] == "worker-b"
    assert result.tickets == len(result.workflows) == 4
    assert sum(result.reads.values()) == 4 + (kill_at == "after_read")


# --------------------------------------------------------------------------- bad input, no server needed


def test_an_unreachable_server_is_one_clear_line_without_the_password(tmp_path):
    url = "postgresql://lab:s3cret@127.0.0.1:1/postgres"  # port 1: nothing listens, refused at once
    with pytest.raises(PostgresServerUnusable) as caught, fresh_database(url):
        pass
    message = str(caught.value)
    assert "s3cret" not in message and "\n" not in message
    assert message.startswith("PostgreSQL server postgresql://lab:***@127.0.0.1:1/postgres: cannot connect")


@pytest.mark.parametrize("url", ["mysql://root@127.0.0.1/lab", "127.0.0.1:5432", ""])
def test_a_url_that_is_not_postgresql_is_refused_before_connecting(url):
    with pytest.raises(PostgresServerUnusable, match="give a URL like postgresql://USER@HOST:PORT/DATABASE"), fresh_database(url):
        pass


@pytest.mark.parametrize(("incidents", "kill_at"), [(("INC-1001", "INC-1002"), "after_lease"), (("INC-1001", "INC-1001"), "after_read"),
                                                     (("INC-1001", "INC-9999"), "after_read"), (("INC-1001",), "after_read")])
def test_two_workers_refuse_bad_input_before_touching_anything(incidents, kill_at, tmp_path):
    with pytest.raises(BadInput):
        two_workers(tmp_path / "two", "postgresql://lab@127.0.0.1:1/postgres", incidents, kill_at)
    assert not (tmp_path / "two").exists()
