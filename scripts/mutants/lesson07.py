"""Bugs for lesson 07 (07_evidence_contract): each breaks one claim the lesson shows."""

CATALOGUE = "tests/lab/test_catalogue.py::test_the_contract_names_the_rule_and_field"

MUTANTS: list[dict] = [
    dict(
        name="contract-accepts-another-incident",
        claim="an answer about another incident is refused (rule same-incident), before any write",
        path="labkit/contract.py",
        old='    if body["incident"] != incident:\n',
        new='    if False and body["incident"] != incident:\n',
        unit_tests=("tests/core/test_contract.py::test_a_response_about_another_incident_is_rejected", CATALOGUE),
    ),
    dict(
        name="contract-size-limit-raised",
        claim="the size is checked on the raw bytes before they are parsed (size-limit speaks first)",
        path="labkit/contract.py",
        old="    if len(data) > MAX_RESPONSE_BYTES:\n",
        new="    if len(data) > 64 * MAX_RESPONSE_BYTES:\n",
        unit_tests=("tests/core/test_contract.py::test_the_size_limit_is_exact", CATALOGUE),
    ),
    dict(
        name="strict-json-keeps-the-last-duplicate",
        claim="a duplicated key is refused (unique-keys), where json.loads keeps the last value without a word",
        path="labkit/jsontext.py",
        old="object_pairs_hook=_refuse_duplicates",
        new="object_pairs_hook=dict",
        unit_tests=(CATALOGUE,),
    ),
    dict(
        name="strict-json-reads-nan",
        claim="NaN and Infinity are refused while parsing (no-nan-or-infinity), before the schema",
        path="labkit/jsontext.py",
        old="parse_constant=_refuse_constant",
        new="parse_constant=float",
        unit_tests=(CATALOGUE,),
    ),
    dict(
        name="refusal-names-no-schema-rule",
        claim="a refusal names the rule it broke (schema:required, schema:enum, ...)",
        path="labkit/contract.py",
        old='    rule = f"schema:{error.validator}"\n',
        new='    rule = "schema"\n',
        unit_tests=(CATALOGUE,),
    ),
    dict(
        name="inspect-skips-the-schema",
        claim="an answer passes the whole contract before any checkpoint moves",
        path="labkit/coordinator.py",
        old="        body = contract.check_evidence(reading.response, run.incident)\n",
        new="        body = contract.strict_loads(reading.response)\n",
        unit_tests=("tests/lab/test_catalogue.py::test_each_case_is_refused_before_any_write",),
    ),
    dict(
        name="decision-inputs-taken-as-the-reference",
        claim="an evidence row records who answered (the adapter's decision inputs), e.g. canned",
        path="labkit/coordinator.py",
        old='        return {"provider": inputs.get("provider"), "rules_revision"',
        new='        return {"provider": "reference-rules", "rules_revision"',
        unit_tests=("tests/lab/test_lesson07_contract.py::test_the_evidence_row_names_the_adapter_that_answered",),
    ),
    dict(
        name="real-instant-not-checked",
        claim="observed_at must be a real instant (rule real-instant)",
        path="labkit/contract.py",
        old='        datetime.fromisoformat(body["observed_at"].replace("Z", "+00:00"))\n',
        new='        pass\n',
        unit_tests=(CATALOGUE,),
    ),
    dict(
        name="evidence-names-the-old-contract",
        claim="an evidence row names the contract revision that accepted it",
        path="labkit/coordinator.py",
        old="store_bounded_txn(conn, incident, contract.CONTRACT, bounded",
        new='store_bounded_txn(conn, incident, "queue-evidence/1", bounded',
        unit_tests=("tests/lab/test_lesson07_contract.py::test_the_evidence_row_names_the_adapter_that_answered",),
    ),
]
