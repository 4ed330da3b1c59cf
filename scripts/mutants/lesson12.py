"""Bugs for lesson 12 (12_crash_explorer): each breaks one claim the lesson shows."""

EXP = "labkit/lab/explorer.py"
INV = "labkit/invariants.py"
T_EXP = "tests/lab/test_explorer.py"

MUTANTS: list[dict] = [
    dict(
        name="random-kills-never-kill",
        claim="random kills stop the run (and its recovery) at a random moment inside the run",
        path=EXP,
        old="        counter = _SqliteSteps(steps)\n",
        new="        counter = _SqliteSteps(None)\n",
        unit_tests=(f"{T_EXP}::test_random_kills_land_inside_the_run_every_time",),
        issue26=True,
        equivalent="",
    ),
    dict(
        name="recovery-never-killed-in-a-pair",
        claim="in a pair, the second point kills the recovery that follows",
        path=EXP,
        old="        ends.append(in_child(lambda: driver.recover(folder, CrashPlan(CrashPoint(rest[0])), url)))\n",
        new="        ends.append(in_child(lambda: driver.recover(folder, NO_CRASH, url)))\n",
        unit_tests=(f"{T_EXP}::test_each_scenario_killed_where_the_model_says_and_cost_the_reads_it_predicts",),
    ),
    dict(
        name="invariant-5-allows-extra-reads",
        claim="invariant 5 counts reads at the provider: a recovery that reads again turns it red",
        path=INV,
        old="for i, n in sorted(expected_reads.items()) if reads[i] != n]",
        new="for i, n in sorted(expected_reads.items()) if reads[i] < n]",
        unit_tests=(f"{T_EXP}::test_each_known_bug_turns_a_cell_of_the_table_red",),
    ),
    dict(
        name="invariant-7-never-recovers-again",
        claim="invariant 7: recovering again changes nothing (a run that can never finish is resumed again)",
        path=INV,
        old="        [f\"{resumed} runs resumed\"] * bool(resumed)\n",
        new="        [f\"{resumed} runs resumed\"] * 0\n",
        unit_tests=(f"{T_EXP}::test_each_known_bug_turns_a_cell_of_the_table_red",),
    ),
    dict(
        name="heat-map-counts-judged-as-held",
        claim="the heat map's cells read held / judged, red where one scenario broke",
        path=EXP,
        old='row[str(number)] = f"{sum(judged)}/{len(judged)}" if judged else "·"',
        new='row[str(number)] = f"{len(judged)}/{len(judged)}" if judged else "·"',
        unit_tests=(f"{T_EXP}::test_a_bug_turns_its_heat_map_cells_red",),
    ),
    dict(
        name="explorer-skips-a-crash-point",
        claim="the explorer takes every crash point from the code: 162 scenarios in two flows",
        path=EXP,
        old='    flows = {"run": points(tickets=True), "work": LEASE_POINTS}\n',
        new='    flows = {"run": points(tickets=True)[:-1], "work": LEASE_POINTS}\n',
        unit_tests=(f"{T_EXP}::test_every_crash_point_the_code_defines_is_explored_alone_and_in_every_pair",),
    ),
    dict(
        name="expected-reads-ignore-the-read-window",
        claim="every extra read follows a kill inside the read window, and the explorer predicts it",
        path=EXP,
        old="    expected = driver.expected_reads(list(zip((end.killed for end in ends), scenario.crash_points, strict=False)))\n",
        new="    expected = 1\n",
        unit_tests=(f"{T_EXP}::test_every_invariant_holds_in_every_scenario_of_the_correct_workflow",),
    ),
]
