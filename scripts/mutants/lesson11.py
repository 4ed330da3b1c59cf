"""Bugs for lesson 11 (11_capacity_and_retention): each breaks one claim the lesson shows."""

RET = "labkit/retention.py"
CAP = "labkit/lab/capacity.py"
T_RET = "tests/mechanisms/test_retention.py"

MUTANTS: list[dict] = [
    dict(
        name="retention-leaves-removed-bytes-in-free-pages",
        claim="retention's removed bytes are gone from the file, even if it dies before VACUUM (secure_delete)",
        path=RET,
        old='conn.execute("PRAGMA secure_delete = ON")',
        new='conn.execute("PRAGMA secure_delete = OFF")',
        unit_tests=(f"{T_RET}::test_a_retention_killed_before_vacuum_leaves_no_removed_byte_in_the_file_after_the_next_checkpoint",),
        issue26=True,
        equivalent="",
    ),
    dict(
        name="retention-removes-unfinished-runs-raw-diagnostic",
        claim="retention removes the raw diagnostics of finished runs only: an unfinished run keeps its own",
        path=RET,
        old="\"(r.step != 'report_completed' OR EXISTS (SELECT 1 FROM effects e",
        new="\"(0 OR EXISTS (SELECT 1 FROM effects e",
        unit_tests=(f"{T_RET}::test_retain_never_touches_an_unfinished_run_and_recovery_finishes_after_it",),
    ),
    dict(
        name="retention-forgets-owed-tickets",
        claim="finished means owing nothing: a run whose ticket effect is intended or uncertain keeps its raw diagnostic",
        path=RET,
        old="f\" AND e.state IN ({', '.join(repr(state) for state in OWED)})))\"",
        new="\" AND 0))\"",
        unit_tests=(f"{T_RET}::test_retain_never_touches_an_unfinished_run_and_recovery_finishes_after_it",),
    ),
    dict(
        name="retention-cutoff-in-the-future",
        claim="only raw diagnostics older than the days given are removed (INC-1006, five days old, keeps its own)",
        path=RET,
        old="cutoff = (parse_instant(at) - timedelta(days=days))",
        new="cutoff = (parse_instant(at) + timedelta(days=days))",
        unit_tests=(f"{T_RET}::test_retain_removes_old_raw_diagnostics_and_every_run_still_answers",),
    ),
    dict(
        name="retention-skips-vacuum",
        claim="retain runs VACUUM: the file shrinks (6.7 to 3.9 MB in section 4)",
        path=RET,
        old='            conn.execute("VACUUM")\n',
        new='            conn.execute("SELECT 1")\n',
        unit_tests=(f"{T_RET}::test_a_retention_killed_before_vacuum_keeps_its_removal_and_the_next_reclaims_the_space",),
    ),
    dict(
        name="removed-diagnostic-reported-missing",
        claim="the reference says 'removed by retention 1', not 'missing'",
        path=RET,
        old="REMOVED if remover is not None else MISSING",
        new="MISSING",
        unit_tests=(f"{T_RET}::test_a_retention_killed_before_vacuum_leaves_no_removed_byte_in_the_file_after_the_next_checkpoint",),
    ),
    dict(
        name="ipv4-not-redacted",
        claim="redaction replaces a broker's IP address before anything is stored",
        path="labkit/redaction.py",
        old='        counts["ipv4"] += 1\n',
        new='        counts["ipv4"] += 1\n        return m.group(0)\n',
        unit_tests=("tests/mechanisms/test_redaction.py",),
    ),
    dict(
        name="capacity-model-ignores-page-overhead",
        claim="counting pages predicts the file within 5 %; rows times record bytes does not",
        path=CAP,
        old="PAGE_SIZE = 4096",
        new="PAGE_SIZE = 8192",
        unit_tests=("tests/lab/test_capacity.py",),
    ),
]
