"""The evidence contract's two validators agree: the compiled one (the accept path) and jsonschema's (which names the rule).

labkit.contract accepts a response when the compiled validator (fastjsonschema) does, and asks
jsonschema's full validator only to explain a refusal. That is safe only if both give the same
yes or no on every document, so they are held to it here:

- every document the project ships: each contract case in data/contract-cases, each capture from
  a live broker in data/captures (as it came, and as the reference provider's answer made from it
  under every rules revision), and each shipped incident's answer;
- generated documents (hypothesis): a valid answer with a field dropped, a field added, a value
  replaced by any JSON value, a number replaced by any number, and arbitrary JSON values.

A refusal is also checked end to end: check_evidence still names jsonschema's rule for it.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_paths import at, paths, reference_answer

from labkit.contract import SCHEMAS, _compiled, _validator, check_evidence
from labkit.errors import EvidenceRejected
from labkit.jsontext import JsonProblem, strict_loads
from labkit.lab.processes import child_env
from labkit.provider import answer, list_incidents
from labkit.rules import RULES_REVISIONS

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)


def full_accepts(document: object) -> bool:
    return _validator().is_valid(document)


def compiled_accepts(document: object) -> bool:
    from fastjsonschema import JsonSchemaValueException

    try:
        _compiled()(document)
    except JsonSchemaValueException:
        return False
    return True


def assert_agree(document: object) -> None:
    assert compiled_accepts(document) == full_accepts(document), json.dumps(document)[:300]


def shipped_documents() -> list[tuple[str, object]]:
    """(name, parsed document) for every JSON document the project ships that a contract check could meet."""
    found: list[tuple[str, object]] = []

    def add(name: str, raw: bytes) -> None:
        try:
            found.append((name, strict_loads(raw, max_depth=64)))
        except JsonProblem:
            pass  # not JSON: refused before any schema is asked

    for path in sorted((ROOT / "data" / "contract-cases").glob("*.response")):
        add(path.name, path.read_bytes())
    for path in sorted((ROOT / "data" / "captures").rglob("*.json")):
        raw = path.read_bytes()
        add(path.name, raw)
        for revision in RULES_REVISIONS:
            add(f"{path.name} (answer, rules {revision})", answer(raw, revision))
    for incident in list_incidents():
        raw = (ROOT / "data" / "incidents" / f"{incident}.json").read_bytes()
        for revision in RULES_REVISIONS:
            add(f"{incident} (answer, rules {revision})", answer(raw, revision))
    return found


SHIPPED = shipped_documents()


def test_the_shipped_documents_cover_both_answers():
    accepted = sum(full_accepts(document) for _, document in SHIPPED)
    assert len(SHIPPED) > 200 and 0 < accepted < len(SHIPPED), (len(SHIPPED), accepted)


@pytest.mark.parametrize("name,document", SHIPPED, ids=[name for name, _ in SHIPPED])
def test_both_validators_agree_on_every_shipped_document(name, document):
    assert_agree(document)


@cache
def valid() -> dict:
    return json.loads(reference_answer("INC-1001"))


ALL_PATHS = paths(valid())
INNER = [path for path in ALL_PATHS if path]
OBJECTS = [path for path in ALL_PATHS if isinstance(at(valid(), path), dict)]
#: Booleans and integers are where Python's equality and JSON Schema's differ (True == 1, 1.0 == 1).
scalars = (st.none() | st.booleans() | st.integers(-3, 3) | st.integers() | st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, 1e9, 1e10])
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
           | st.sampled_from(["", "INC-1001", "INC-1001\n", "queue-evidence/3", "running", "stopped", "down", "stream",
                              "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z\n", "2026-01-01T00:00:00.123+02:00", "x" * 281]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                      max_leaves=10)


@st.composite
def mutated(draw) -> object:
    body = copy.deepcopy(valid())
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop", "add", "replace"]))
        if kind == "drop":
            path = draw(st.sampled_from(INNER))
            try:
                del at(body, path[:-1])[path[-1]]
            except (KeyError, IndexError, TypeError):
                pass  # an earlier change removed or replaced what held it
        elif kind == "add":
            path = draw(st.sampled_from(OBJECTS))
            try:
                at(body, path)[draw(st.sampled_from(["running", "name", "rate", "extra", "step"]) | st.text(max_size=6))] = draw(values)
            except (KeyError, IndexError, TypeError):
                pass
        else:
            path = draw(st.sampled_from(ALL_PATHS))
            if not path:
                body = draw(values)
                continue
            try:
                at(body, path[:-1])[path[-1]] = draw(values)
            except (KeyError, IndexError, TypeError):
                pass
    return body


@SETTINGS
@given(document=mutated())
def test_both_validators_agree_on_mutated_answers(document):
    assert_agree(document)


@SETTINGS
@given(document=values)
def test_both_validators_agree_on_any_json_value(document):
    assert_agree(document)


def test_a_refusal_still_names_the_full_validators_rule():
    body = copy.deepcopy(valid())
    body["queue"]["consumers"] = -1
    assert not compiled_accepts(body)
    with pytest.raises(EvidenceRejected) as refused:
        check_evidence(json.dumps(body).encode(), "INC-1001")
    assert (refused.value.field, refused.value.rule) == ("queue.consumers", "schema:minimum")


@pytest.mark.parametrize("revision", sorted(SCHEMAS))
def test_every_shipped_schema_is_a_valid_draft_2020_12_schema(revision):
    """The accept path compiles the schema without asking jsonschema, so the schema is checked here."""
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(json.loads(SCHEMAS[revision].read_text(encoding="utf-8")))


# In a fresh interpreter: an accepted answer is checked without importing jsonschema (a tenth of a
# second of every `python -m labkit run` child); a refused one imports it to name the rule.
_WHICH_IMPORTS = """
import json, sys
from labkit.contract import check_evidence
from labkit.errors import EvidenceRejected
answer = json.loads(sys.argv[1])
check_evidence(json.dumps(answer).encode(), "INC-1001")
accepted = "jsonschema" in sys.modules
answer["queue"]["consumers"] = -1
try:
    check_evidence(json.dumps(answer).encode(), "INC-1001")
except EvidenceRejected as refused:
    print(accepted, "jsonschema" in sys.modules, refused.rule)
"""


def test_an_accepted_answer_never_imports_jsonschema_and_a_refused_one_does():
    done = subprocess.run([sys.executable, "-c", _WHICH_IMPORTS, json.dumps(valid())],
                          capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.stdout.split() == ["False", "True", "schema:minimum"], done.stderr
