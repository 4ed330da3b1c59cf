"""Bugs for lesson 14 (14_choosing_an_engine): each breaks one claim the lesson shows."""

DBOS = "labkit/engines/dbos.py"
ENGINES = "tests/engines/test_engines.py"

MUTANTS: list[dict] = [
    dict(
        name="dbos-read-step-skips-the-contract",
        claim="the read step checks the evidence contract, so DBOS records a refused answer as its error, "
              "never as its output",
        path=DBOS,
        old="        check_evidence(reading.response, incident)  # the contract: a refused answer is never recorded"
            " as the output\n",
        new="",
        unit_tests=("tests/lab/test_lesson14_dbos_record.py",),
        issue26=True,
    ),
    dict(
        name="dbos-evidence-step-does-not-look-first",
        claim="labkit's write_evidence_once looks first under the write lock, so a replay writes nothing",
        path=DBOS,
        old="        if run.step is not Step.NOT_INSPECTED:\n",
        new="        if run.step is not Step.NOT_INSPECTED and False:\n",
        unit_tests=(
            "tests/lab/test_engine_lesson.py::test_a_dbos_step_killed_after_its_commit_runs_again_and_labkits_step_keeps_one_row",
        ),
    ),
    dict(
        name="dbos-ticket-key-not-the-same-on-replay",
        claim="the ticket's key is derived from the workflow id, the same on every replay (every invariant holds)",
        path=DBOS,
        old="key, request = ticket_key(DBOS.workflow_id), ticket_request(receipt.report)",
        new="key, request = ticket_key(f'{DBOS.workflow_id}{app.crash}'), ticket_request(receipt.report)",
        unit_tests=(f"{ENGINES}::test_a_kill_at_every_point_is_recovered_by_either_engine_with_every_invariant_held",),
    ),
    dict(
        name="dbos-workflow-id-not-the-incident",
        claim="the workflow's id is the incident's id, so starting it twice joins the first",
        path=DBOS,
        old="        with self._set_id(incident):\n            return self.workflow(incident, tickets)\n",
        new="        return self.workflow(incident, tickets)\n",
        unit_tests=("tests/lab/test_lesson14_dbos_record.py::test_the_workflow_id_is_the_incident_so_starting_it_twice_joins_the_first",),
    ),
    dict(
        name="dbos-read-window-claims-the-evidence-commit",
        claim="DBOS records the read when its step returns: a kill inside the evidence transaction costs no read",
        path=DBOS,
        old="read_window: ClassVar[frozenset[CrashPoint]] = frozenset({CrashPoint.AFTER_READ})",
        new="read_window: ClassVar[frozenset[CrashPoint]] = frozenset({CrashPoint.AFTER_READ, "
            "CrashPoint.BEFORE_EVIDENCE_COMMIT})",
        unit_tests=(f"{ENGINES}::test_a_kill_at_every_point_is_recovered_by_either_engine_with_every_invariant_held",),
    ),
    dict(
        name="dbos-step-error-shown-as-output",
        claim="DBOS's record says, for each step, whether it recorded an output or an error",
        path=DBOS,
        old='("output" if error is None else _error_named(error))',
        new='"output"',
        unit_tests=("tests/lab/test_lesson14_dbos_record.py",),
    ),
    dict(
        name="dbos-every-process-runs-version-1",
        claim="a process recovers only the pending workflows of its own application version; others wait",
        path=DBOS,
        old='"application_version": app_version',
        new='"application_version": DEFAULT_APP_VERSION',
        unit_tests=(f"{ENGINES}::test_dbos_recovers_a_workflow_only_under_the_application_version_that_started_it",),
    ),
]
