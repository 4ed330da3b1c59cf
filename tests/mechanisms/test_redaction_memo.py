"""Remembered redaction gives the same answer as redaction done afresh (labkit.redaction's memo of short strings).

redact_text remembers what it made of a short string, keyed by the text and whether the field
is a version field (the only thing the field decides); is_secret_name remembers short names.
Held here: for generated strings and field paths, the remembered answer equals the one computed
from scratch, on the first call and on every later one; a caller that changes the counts it was
handed does not change what the next caller gets; and whole documents (every shipped incident and
capture, and generated JSON) redact to the same value and record with the memo cold or warm.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import redaction
from labkit.redaction import MEMO_MAX_CHARS, _is_version_field, _redact_text, _secret_words, is_secret_name, redact, redact_text

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)

#: Pieces that trigger each rule, so generated text meets the patterns, not only random letters.
PIECES = ["password=", "token: ", "Bearer ", "amqp://svc:pw@host", "eyJhbGciOi.eyJzdWIi.sig", "a@b.example.com", "10.0.0.5",
          "::ffff:10.0.0.5", "fe80::1%eth0", "Authorization: Basic bW9uaXRvcg==", "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1x",
          "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----", "[redacted:token]", "rabbit@orders-eu-1-a",
          "version", "1.2.3.4", " ", "\n", '"', "'", "{", "}", "=", ":"]
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=10), max_size=8).map("".join)
fields = st.sampled_from(["", "queue.name", "node.version", "broker_version", "a.b.versionish", "x"]) | st.text(max_size=12)
names = st.lists(st.sampled_from(["db", "Password", "token", "_ttl", "api", "key", "auth", "mechanism", "2", "-", "Sig"]),
                 max_size=5).map("".join) | st.text(max_size=16)


def fresh(text: str, field: str):
    if not text:
        return text, {}
    redacted, counts = _redact_text(text, _is_version_field(field))
    return redacted, dict(counts)


@SETTINGS
@given(text=texts, field=fields)
def test_a_remembered_redaction_is_the_one_computed_afresh(text, field):
    expected = fresh(text, field)
    for _ in range(2):  # the first call fills the memo, the second reads it
        redacted, counts = redact_text(text, field)
        assert (redacted, dict(counts)) == expected
        counts["email"] += 5  # a caller changing its copy of the counts ...
    assert dict(redact_text(text, field)[1]) == expected[1]  # ... changes nothing for the next one


@SETTINGS
@given(name=names)
def test_a_remembered_name_decision_is_the_one_computed_afresh(name):
    assert is_secret_name(name) == _secret_words(name) == is_secret_name(name)


def test_long_strings_are_not_kept():
    redaction._redact_short.cache_clear()
    long = "password=" + "x" * MEMO_MAX_CHARS
    assert redact_text(long)[0] == "password=[redacted:secret]"
    assert redaction._redact_short.cache_info().currsize == 0


def documents() -> list[object]:
    found = []
    for path in sorted((ROOT / "data" / "incidents").glob("*.json")) + sorted((ROOT / "data" / "captures").rglob("*.json")):
        found.append(json.loads(path.read_text(encoding="utf-8")))
    return found


def test_whole_documents_redact_alike_cold_and_warm():
    shipped = documents()
    assert len(shipped) > 50
    redaction._redact_short.cache_clear()
    redaction._secret_name.cache_clear()
    cold = [redact(document) for document in shipped]
    warm = [redact(document) for document in shipped]
    assert cold == warm
    assert redaction._redact_short.cache_info().hits > 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names | texts, inner, max_size=4), max_leaves=12,
)


@SETTINGS
@given(value=json_values)
def test_generated_documents_redact_alike_cold_and_warm(value):
    redaction._redact_short.cache_clear()
    redaction._secret_name.cache_clear()
    cold = redact(value, field="node.version")
    assert redact(value, field="node.version") == cold
