"""The evidence contract: what a provider response must be before any checkpoint advances.

What a provider returns is untrusted input, never an instruction. The coordinator records it
only after :func:`check_evidence` has accepted it: bounded in size, strict JSON (UTF-8, no
NaN or Infinity, no duplicated key, bounded nesting: :func:`labkit.jsontext.strict_loads`),
matching the JSON Schema in ``labkit/schemas/``, and about the incident that was asked
for. Nothing is repaired: a response that fails any check raises
:class:`~labkit.errors.EvidenceRejected` naming the field, and the transaction around the
read rolls back. Taught in 04_rollback and 07_evidence_contract.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from .errors import EvidenceRejected
from .jsontext import JsonProblem, strict_loads
from .redaction import redact

#: Revision 3 models what a live broker sends (absent counters, no capacity on a stream, a stopped
#: node, a queue that is down); revision 2's schema demanded fields a real answer often lacks.
CONTRACT = "queue-evidence/3"
#: Every contract revision labkit has shipped, with its schema file: stored evidence says which
#: revision accepted it, so it can be re-checked against that one (revision 1's and 2's files stay).
SCHEMAS = {
    "queue-evidence/1": Path(__file__).parent / "schemas" / "queue-evidence-1.schema.json",
    "queue-evidence/2": Path(__file__).parent / "schemas" / "queue-evidence-2.schema.json",
    "queue-evidence/3": Path(__file__).parent / "schemas" / "queue-evidence-3.schema.json",
}
SCHEMA_PATH = SCHEMAS[CONTRACT]


def schema_for(contract_id: str) -> Path:
    """The schema file of contract revision ``contract_id``; ValueError for one labkit never shipped."""
    if not isinstance(contract_id, str) or contract_id not in SCHEMAS:
        raise ValueError(f"unknown evidence contract {contract_id!r}: labkit knows {', '.join(SCHEMAS)}")
    return SCHEMAS[contract_id]


#: Evidence is stored inline, so it is bounded. A queue snapshot is about 1 KB; a response
#: sixteen times that is not a diagnosis, it is a dump (see 11_capacity_and_retention).
MAX_RESPONSE_BYTES = 16_384
#: A raw diagnostic over this size is refused, and nothing about the read is stored: a
#: megabyte is a dump, and redacting it would hold the write lock for a noticeable time.
MAX_DIAGNOSTIC_BYTES = 1 << 20


def check_diagnostic_size(incident: str, size: int) -> None:
    """Refuse a raw diagnostic of ``size`` bytes over :data:`MAX_DIAGNOSTIC_BYTES`.

    The store checks what it was handed; the reference provider checks a snapshot file's size
    before reading it, so a huge file is refused without first being read into memory.
    """
    if size > MAX_DIAGNOSTIC_BYTES:
        raise EvidenceRejected(
            incident, "(diagnostic)", f"{size} bytes, over the {MAX_DIAGNOSTIC_BYTES}-byte limit for a raw diagnostic", "size-limit"
        )


@lru_cache(maxsize=1)
def _schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _validator():
    """jsonschema's full validator: it names the field and the rule of a refusal.

    Imported on first use, that is on the first refusal: jsonschema's import is about a tenth
    of a second, a quarter of a ``python -m labkit run`` child's time, and an accepted answer
    never needs it. (`python -m labkit` also makes that import faster: labkit/__main__.py.)
    """
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(_schema())
    return Draft202012Validator(_schema())


@lru_cache(maxsize=1)
def _compiled():
    """The same schema compiled to Python (fastjsonschema): the accept path, about ten times faster.

    It answers only "accepted or not". A refusal is explained by the full validator (which names
    the field and the rule), so what a refused response is told is the same either way;
    tests/core/test_contract_validators.py holds both to the same answer over every shipped
    contract case, every capture and generated documents, and checks the schema itself.
    """
    import fastjsonschema

    return fastjsonschema.compile(_schema())


def prepare() -> None:
    """Build both validators now, not inside the first check.

    For a process that goes on to time or fork: a pool worker before it says ``ready`` (else its
    first run pays inside its write transaction), the explorer and the engines before their
    children fork (else each child pays inside its first read, seconds on a loaded machine).
    """
    _compiled()
    _validator()


def schema_errors(body: object) -> list[tuple[str, str, str]]:
    """Every way ``body`` breaks the contract's JSON Schema, as (field, problem, rule); [] when it satisfies it.

    The compiled validator decides first; only when it refuses does the full validator walk the
    document for the field and rule to name.
    """
    from fastjsonschema import JsonSchemaValueException

    try:
        _compiled()(body)
        return []
    except JsonSchemaValueException:
        # The full validator is the authority: it names what is wrong (and were the two ever to
        # differ, its answer, not the compiled one's, is the one that counts for a refusal).
        return [_describe(error) for error in _validator().iter_errors(body)]


def check_evidence(raw: bytes | str, incident: str) -> dict:
    """Return the parsed response if it satisfies the contract; otherwise raise EvidenceRejected."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    if len(data) > MAX_RESPONSE_BYTES:
        raise EvidenceRejected(incident, "(response)", f"{len(data)} bytes, over the {MAX_RESPONSE_BYTES}-byte limit", "size-limit")
    try:
        body = strict_loads(data)
    except JsonProblem as problem:
        raise EvidenceRejected(incident, "(response)", problem.reason, problem.rule) from None
    errors = schema_errors(body)
    if errors:
        # Report the first problem in the contract's own field order: a missing count in
        # `queue` explains a missing `diagnosis` better than the other way round.
        field, what, rule = min(errors, key=lambda error: _reading_order(error[0]))
        raise EvidenceRejected(incident, field, what, rule)
    try:
        datetime.fromisoformat(body["observed_at"].replace("Z", "+00:00"))
    except ValueError:
        raise EvidenceRejected(incident, "observed_at", f"{body['observed_at']!r} is not a real instant", "real-instant") from None
    if body["incident"] != incident:
        about = f"the response is about {body['incident']!r}, not the incident that was asked for"
        raise EvidenceRejected(incident, "incident", about, "same-incident")
    return body


def _reading_order(field: str) -> tuple[int, str]:
    top = field.split(".")[0]
    order = _schema()["required"]
    return (order.index(top) if top in order else len(order), field)


def _describe(error) -> tuple[str, str, str]:
    """Turn a jsonschema error into (dotted field path, short problem, rule) for a one-line message.

    Classified by the validator that failed and the path it failed at (jsonschema's own
    fields), never by parsing its message text.
    """
    rule = f"schema:{error.validator}"
    where, what = _what(error)
    return where, what, rule


def _what(error) -> tuple[str, str]:
    path = [str(part) for part in error.absolute_path]
    if error.validator == "required":
        missing = [name for name in error.validator_value if name not in error.instance]  # in the contract's order
        return ".".join(path + missing[:1]), "is missing"
    if error.validator == "additionalProperties":
        extras = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return ".".join(path + extras[:1]) or "(response)", "is not part of the contract"
    where = ".".join(path) or "(response)"
    shown = json.dumps(redact(error.instance).value)  # a refused value is quoted, never a secret in it
    if len(shown) > 40:
        shown = shown[:37] + "..."
    if error.validator == "type":
        return where, f"{shown} is not of type {error.validator_value!r}"
    if error.validator == "enum":
        return where, f"{shown} is not one of {', '.join(map(str, error.validator_value))}"
    if error.validator == "const":
        return where, f"{shown} should be {json.dumps(error.validator_value)}"
    if error.validator in ("minimum", "maximum"):
        return where, f"{shown} is {'below the minimum' if error.validator == 'minimum' else 'above the maximum'} {error.validator_value}"
    if error.validator == "maxProperties":  # revision 3: a stopped node reports its name and running, nothing else
        return where, f"has more than {error.validator_value} fields, which a stopped node does not report"
    if error.validator in ("maxLength", "maxItems"):
        return where, f"is longer than {error.validator_value}"
    return where, error.message if len(error.message) <= 80 else error.message[:77] + "..."
