"""Versioning decisions are made per run, and before recovery starts (issue 26's two lesson-08 bugs).

- The migration rule asks whether *this* run has an assessment, not whether any run has one:
  on a database where one paused run has an assessment and another does not, a rule that asks
  about any run migrates both, and this release then cannot finish the second.
- ``recover`` refuses a run of another workflow version before it touches any run: this
  release's own unfinished run stays where it is, and the provider is not asked.
"""

from __future__ import annotations

from contextlib import closing

import pytest

import labkit
from labkit.steps import Step


@pytest.fixture
def one_assessed_one_not(lab, conn):
    """The previous release left INC-1004 and INC-1007 at evidence_recorded; only INC-1007 was re-evaluated."""
    old = lab.coordinator(conn, workflow_version=1)
    for incident in ("INC-1004", "INC-1007"):
        old.start(incident)
        old.inspect(incident)
    labkit.versioning.reevaluate(lab.db, "INC-1007", "before the upgrade", lab.clock)
    return lab


def test_labkit_rule_asks_about_this_run_only(one_assessed_one_not, conn):
    with labkit.transaction(conn):
        verdicts = {incident: labkit.versioning.why_not(conn, incident, Step.EVIDENCE_RECORDED, 2)
                    for incident in ("INC-1004", "INC-1007")}
    assert verdicts["INC-1007"] is None, "INC-1007 has an assessment of its own: it means the same under version 2"
    assert verdicts["INC-1004"] and "has none" in verdicts["INC-1004"], "INC-1004 has no assessment of its own"


def test_a_migration_with_one_assessed_run_and_one_not_is_refused_for_the_other(one_assessed_one_not, snapshot):
    lab = one_assessed_one_not
    before = snapshot(lab.db)
    with pytest.raises(labkit.errors.MigrationRefused) as refused:
        labkit.versioning.migrate(lab.db, 2, "upgrade", lab.clock)
    assert refused.value.incident == "INC-1004"
    assert snapshot(lab.db) == before


def test_after_its_own_reevaluation_both_migrate_and_this_release_finishes_both(one_assessed_one_not):
    lab = one_assessed_one_not
    labkit.versioning.reevaluate(lab.db, "INC-1004", "before the upgrade", lab.clock)
    entry = labkit.versioning.migrate(lab.db, 2, "upgrade", lab.clock)
    assert entry is not None and entry.runs == ["INC-1004", "INC-1007"]
    results = labkit.recover(lab.db, lab.provider(), clock=lab.clock)
    assert [(r.incident, r.error) for r in results] == [("INC-1004", None), ("INC-1007", None)]


def test_recover_refuses_a_run_of_another_version_before_it_starts(lab, conn, snapshot):
    """This release's own run comes first in the list, and still nothing is resumed."""
    lab.coordinator(conn).start("INC-1001")  # this release, not_inspected
    old = lab.coordinator(conn, workflow_version=1)
    old.start("INC-1004")
    old.inspect("INC-1004")
    reads = len(lab.provider_log.calls())
    conn.close()
    before = snapshot(lab.db)
    with pytest.raises(labkit.errors.WorkflowVersionMismatch) as refused:
        labkit.recover(lab.db, lab.provider(), clock=lab.clock)
    assert refused.value.incident == "INC-1004"
    assert snapshot(lab.db) == before, "recover moved a run before refusing"
    assert len(lab.provider_log.calls()) == reads, "recover asked the provider before refusing"
    with closing(labkit.connect_readonly(lab.db)) as reader, labkit.read_transaction(reader):
        assert labkit.store.find_run_txn(reader, "INC-1001").step is Step.NOT_INSPECTED


def test_recover_on_the_command_line_refuses_before_it_starts(lab, conn, cli, snapshot):
    lab.coordinator(conn).start("INC-1001")
    old = lab.coordinator(conn, workflow_version=1)
    old.start("INC-1004")
    old.inspect("INC-1004")
    conn.close()
    before = snapshot(lab.db)
    done = cli("recover", "--db", lab.db)
    assert done.returncode == 2 and "INC-1004" in done.stderr and "workflow version 1" in done.stderr
    assert done.stdout == "", "recover reported a run before refusing"
    assert snapshot(lab.db) == before
