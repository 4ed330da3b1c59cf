"""Bugs for lesson 13 (13_evaluation): each breaks one claim the lesson shows."""

EVALUATION = "labkit/evaluation.py"
UNIT = "tests/mechanisms/test_evaluation.py"

MUTANTS: list[dict] = [
    dict(
        name="undefined-precision-reported-as-zero",
        claim="a precision or recall with nothing to divide by is undefined (none), not 0",
        path=EVALUATION,
        old='"precision": right / told if told else None, "recall": right / true if true else None,',
        new='"precision": right / told if told else 0.0, "recall": right / true if true else 0.0,',
        unit_tests=(
            f"{UNIT}::test_the_human_output_is_two_titled_tables",
            "tests/lab/test_lesson13_undefined_ratios.py",
        ),
        issue26=True,
    ),
    dict(
        name="scored-by-the-original-assessment",
        claim="each run is scored by its latest assessment (the highest seq)",
        path=EVALUATION,
        old='found[max(found)] if which == "latest" else found[min(found)]',
        new='found[min(found)] if which == "latest" else found[min(found)]',
        unit_tests=(f"{UNIT}::test_reevaluated_runs_are_scored_beside_their_originals_and_recovery_does_not_move",),
    ),
    dict(
        name="a-run-not-inspected-counted-wrong",
        claim="a run with no assessment yet is not scored, neither right nor wrong",
        path=EVALUATION,
        old="        if not found:\n            no_assessment.append(incident)\n",
        new="        if not found:\n            no_assessment.append(incident)\n"
            "            pairs.append((incident, truth.get(incident, '?'), '(not inspected)'))\n",
        unit_tests=(f"{UNIT}::test_runs_without_an_assessment_or_ground_truth_are_listed_not_counted_wrong",),
    ),
    dict(
        name="the-task-scorer-may-read-receipts",
        claim="each scorer's connection refuses every table outside its list (the wall)",
        path=EVALUATION,
        old="        if action == sqlite3.SQLITE_READ and first in tables:",
        new="        if action == sqlite3.SQLITE_READ and (first in tables or first == 'receipts'):",
        unit_tests=(f"{UNIT}::test_each_scorers_connection_refuses_every_table_outside_its_list",),
    ),
    dict(
        name="duplicate-tickets-not-counted",
        claim="the recovery card counts tickets beyond one per incident at the destination",
        path=EVALUATION,
        old="duplicate_effects=sum(max(0, n - 1) for n in measured_tickets) if measured_tickets else None,",
        new="duplicate_effects=sum(max(0, n - 2) for n in measured_tickets) if measured_tickets else None,",
        unit_tests=(f"{UNIT}::test_a_right_diagnosis_can_hide_a_duplicated_ticket",),
    ),
    dict(
        name="rereads-not-counted",
        claim="the recovery card counts provider reads beyond one per run",
        path=EVALUATION,
        old="rereads=sum(max(0, row.provider_reads - 1) for row in rows),",
        new="rereads=sum(max(0, row.provider_reads - 2) for row in rows),",
        unit_tests=(f"{UNIT}::test_a_crash_between_read_and_commit_costs_one_reread_and_nothing_on_the_task_card",),
    ),
    dict(
        name="an-unfinished-run-counted-completed",
        claim="the ship gate stops a release with a run not completed",
        path=EVALUATION,
        old="        completed=sum(1 for row in rows if row.completed),",
        new="        completed=len(rows),",
        unit_tests=(f"{UNIT}::test_recovery_from_scenarios_counts_what_each_row_says",),
    ),
    dict(
        name="reevaluation-overwrites-the-original",
        claim="reevaluate adds an assessment beside the original and overwrites nothing; the original card stays",
        path="labkit/assessments.py",
        old='    conn.execute(\n        "INSERT INTO assessments (incident, seq,',
        new='    conn.execute("DELETE FROM assessments WHERE incident = ?", (incident,))\n'
            '    conn.execute(\n        "INSERT INTO assessments (incident, seq,',
        unit_tests=(f"{UNIT}::test_reevaluated_runs_are_scored_beside_their_originals_and_recovery_does_not_move",),
    ),
]
