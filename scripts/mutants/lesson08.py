"""Bugs for lesson 08 (08_versioning): each breaks one claim the lesson shows."""

VERSIONING = "tests/mechanisms/test_versioning.py"
PER_RUN = "tests/mechanisms/test_versioning_per_run.py"

MUTANTS: list[dict] = [
    dict(
        name="recover-meets-old-versions-one-by-one",
        claim="recover refuses runs of another workflow version before it starts (section 2: its cost)",
        path="labkit/recovery.py",
        old="        for run in unfinished:\n            coordinator.check_version(run)\n",
        new="        for run in []:\n            coordinator.check_version(run)\n",
        unit_tests=(f"{PER_RUN}::test_recover_refuses_a_run_of_another_version_before_it_starts",
                    f"{PER_RUN}::test_recover_on_the_command_line_refuses_before_it_starts"),
        issue26=True,
    ),
    dict(
        name="migration-rule-asks-about-any-run",
        claim="the migration rule asks whether this run has an assessment, not whether any run has one",
        path="labkit/versioning.py",
        old='conn.execute("SELECT 1 FROM assessments WHERE incident = ?", (incident,))',
        new='conn.execute("SELECT 1 FROM assessments")',
        unit_tests=(f"{PER_RUN}::test_labkit_rule_asks_about_this_run_only",
                    f"{PER_RUN}::test_a_migration_with_one_assessed_run_and_one_not_is_refused_for_the_other"),
        issue26=True,
    ),
    dict(
        name="run-of-another-version-accepted",
        claim="a paused run of the previous release is refused by run and recover, exit 2, nothing changed",
        path="labkit/coordinator.py",
        old="    if found != expected:\n        raise WorkflowVersionMismatch(incident, found, expected)\n",
        new="    if found > expected:\n        raise WorkflowVersionMismatch(incident, found, expected)\n",
        unit_tests=(f"{VERSIONING}::test_version_2_refuses_a_version_1_run_everywhere",),
    ),
    dict(
        name="migration-ignores-the-rule",
        claim="a migration is refused, naming the run, when one run cannot be mapped; nothing moves",
        path="labkit/versioning.py",
        old="            if why:\n                raise MigrationRefused",
        new="            if why and False:\n                raise MigrationRefused",
        unit_tests=(f"{VERSIONING}::test_migrate_refuses_what_it_cannot_map_and_changes_nothing",),
    ),
    dict(
        name="migration-not-logged",
        claim="a migration is logged (from, to, runs, when, why)",
        path="labkit/versioning.py",
        old="        return _log_txn(conn, from_version, to_version, [run.incident for run in runs], reason, clock)\n",
        new="        return Migration(0, from_version, to_version, [run.incident for run in runs], clock.now(), reason)\n",
        unit_tests=(f"{VERSIONING}::test_migrate_moves_every_mappable_run_in_one_logged_step",),
    ),
    dict(
        name="migration-commits-each-run",
        claim="a migration is all or nothing: one failing half way leaves every table as before",
        path="labkit/versioning.py",
        old="            _move_txn(conn, run.incident, from_version, to_version)\n",
        new=("            _move_txn(conn, run.incident, from_version, to_version)\n"
             "            conn.commit()\n            conn.execute(\"BEGIN IMMEDIATE\")\n"),
        unit_tests=(f"{VERSIONING}::test_a_migration_that_fails_half_way_leaves_nothing_half_migrated",),
    ),
    dict(
        name="migration-moves-the-state-version",
        claim="a migration changes only runs.workflow_version: steps and state versions untouched",
        path="labkit/versioning.py",
        old='"UPDATE runs SET workflow_version = ? WHERE incident = ?',
        new='"UPDATE runs SET workflow_version = ?, state_version = state_version + 1 WHERE incident = ?',
        unit_tests=(f"{VERSIONING}::test_migrate_moves_every_mappable_run_in_one_logged_step",),
    ),
    dict(
        name="reevaluation-skips-the-original",
        claim="re-evaluating a previous-release run records the original decision first, beside the new one",
        path="labkit/versioning.py",
        old="        if latest_assessment_txn(conn, incident) is None:\n",
        new="        if False:\n",
        unit_tests=(f"{VERSIONING}::test_reevaluation_of_a_run_of_the_previous_release_records_its_original_first",),
    ),
    dict(
        name="completion-reads-the-first-assessment",
        claim="version 2 completes a run from its latest assessment",
        path="labkit/assessments.py",
        old="WHERE incident = ? ORDER BY seq DESC LIMIT 1",
        new="WHERE incident = ? ORDER BY seq LIMIT 1",
        unit_tests=(f"{VERSIONING}::test_version_2_completes_from_the_latest_assessment",),
    ),
    dict(
        name="reevaluation-overwrites-the-evidence",
        claim="a re-evaluation changes only the assessments table: the evidence's decision inputs stay",
        path="labkit/versioning.py",
        old='        return record_assessment_txn(conn, incident, "reevaluation", diagnosis, inputs, clock, reason=reason)\n',
        new=('        conn.execute("UPDATE evidence SET rules_revision = ? WHERE incident = ?", (revision, incident))\n'
             '        return record_assessment_txn(conn, incident, "reevaluation", diagnosis, inputs, clock, reason=reason)\n'),
        unit_tests=(f"{VERSIONING}::test_reevaluation_adds_an_assessment_beside_the_original_and_reads_nothing",),
    ),
    dict(
        name="rules-2-ignore-disk-alarms",
        claim="revision 2 reads a disk alarm on any node as blocking the whole cluster (section 6)",
        path="labkit/rules.py",
        old="    disk_alarms = [node for node, _mem, disk, _used, _limit in seen if disk]\n",
        new="    disk_alarms: list = []\n",
        unit_tests=("tests/mechanisms/test_rules.py::test_a_disk_alarm_on_another_node_blocks_publishers_everywhere",),
    ),
]
