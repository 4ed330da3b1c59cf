"""Redaction: sensitive values never reach the database, and what was replaced is recorded without them.

The module's decisions (labkit/redaction.py) each have a test here: version numbers, node
names, routing keys, a secret split across fields, Unicode, hostile sizes and shapes.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

import labkit
from labkit.redaction import MAX_RECORDED_FIELDS, OTHER_FIELDS, is_secret_name, redact, redact_document, redact_text

REPO = Path(labkit.__file__).resolve().parent.parent

#: Every sensitive value the two shipped incidents carry (data/README.md, "Sensitive values").
SHIPPED_SECRETS = {
    "INC-1015": ["Wq7-not-a-real-pw", "198.51.100.23", "Pr0be-not-a-real-pw", "crm-oncall@example.com", "monitor:Pr0be"],
    "INC-1016": ["eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9", "bm90LWEtcmVhbC1zaWduYXR1cmU", "sl_9f2c4e81b7d3a605",
                 "2001:db8:52:7::1c", "2001:db8:52:7::2f", "2001:db8:52:9::11", "2001:db8:52:1::b", "payments-oncall@example.com"],
}


def redacted(text: str, field: str = "") -> tuple[str, dict[str, int]]:
    out, counts = redact_text(text, field)
    return out, dict(counts)


# --------------------------------------------------------------------------- each kind


@pytest.mark.parametrize(("text", "expected", "kinds"), [
    ("cannot connect to amqp://crm-sync:hunter2@rabbit.example.com:5672/crm",
     "cannot connect to amqp://[redacted:uri-credentials]@rabbit.example.com:5672/crm", {"uri-credentials": 1}),
    ("https://monitor:pw@10.1.2.3:15671/api", "https://[redacted:uri-credentials]@[redacted:ipv4]:15671/api",
     {"uri-credentials": 1, "ipv4": 1}),
    ("amqps://svc:p@ss@host/vh", "amqps://[redacted:uri-credentials]@host/vh", {"uri-credentials": 1}),
    ("Authorization: Bearer abc.def-123", "Authorization: [redacted:token]", {"token": 1}),
    ("curl -H 'X-Api-Key: k-93b1f0' https://x", "curl -H 'X-Api-Key: [redacted:token]' https://x", {"token": 1}),
    ("sent Basic bW9uaXRvcjpwdw== to the API", "sent Basic [redacted:token] to the API", {"token": 1}),
    ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_part", "token [redacted:token]", {"token": 1}),
    ("password=hunter2 user=svc", "password=[redacted:secret] user=svc", {"secret": 1}),
    ('client_secret: "s3cr3t"; api_key=k1', 'client_secret: "[redacted:secret]"; api_key=[redacted:secret]', {"secret": 2}),
    ("https://hooks.example.com/s?access_token=abc&x=1", "https://hooks.example.com/s?access_token=[redacted:secret]&x=1",
     {"secret": 1}),
    ("page dana.whitfield@example.co.uk now.", "page [redacted:email] now.", {"email": 1}),
    ("peer 203.0.113.9:5672", "peer [redacted:ipv4]:5672", {"ipv4": 1}),
    ("[2001:db8::1]:5672 -> fe80::1%eth0.", "[[redacted:ipv6]]:5672 -> [redacted:ipv6].", {"ipv6": 2}),
    ("mapped ::ffff:192.0.2.7 here", "mapped [redacted:ipv6] here", {"ipv6": 1}),
])
def test_each_kind_is_replaced_by_its_marker(text, expected, kinds):
    assert redacted(text) == (expected, kinds)


def test_the_record_names_fields_and_kinds_never_values():
    value = {"probe": {"url": "https://u:hunter2@198.51.100.7/x", "headers": {"Authorization": "Bearer abc123xyz"}},
             "owner": "oncall@example.com", "peers": ["2001:db8::5", "2001:db8::6"]}
    result = redact(value)
    assert result.value == {
        "probe": {"url": "https://[redacted:uri-credentials]@[redacted:ipv4]/x", "headers": {"Authorization": "[redacted:secret]"}},
        "owner": "[redacted:email]", "peers": ["[redacted:ipv6]", "[redacted:ipv6]"],
    }
    assert {(r.field, r.kind, r.count) for r in result.redactions} == {
        ("probe.url", "uri-credentials", 1), ("probe.url", "ipv4", 1), ("probe.headers.Authorization", "secret", 1),
        ("owner", "email", 1), ("peers.0", "ipv6", 1), ("peers.1", "ipv6", 1),
    }
    assert result.by_kind() == {"email": 1, "ipv4": 1, "ipv6": 2, "secret": 1, "uri-credentials": 1} and result.count == 6
    shown = repr(result.redactions)
    for secret in ("hunter2", "198.51.100.7", "abc123xyz", "oncall@example.com", "2001:db8::5"):
        assert secret not in shown and secret not in json.dumps(result.value)


def test_a_secret_field_is_replaced_whole_whatever_it_holds():
    """Everything under a secret name is one marker: no key or value below it is kept or recorded."""
    value = {"password": "correct horse battery staple", "pin_token": 4711,
             "credentials": {"user": "svc", "hunter2-as-a-key": ["a", 1]}, "api_key": "", "secret": None, "session_token": True}
    result = redact(value)
    assert result.value == {
        "password": "[redacted:secret]", "pin_token": "[redacted:secret]", "credentials": "[redacted:secret]",
        "api_key": "", "secret": None, "session_token": True,  # nothing to hide in an empty string, None or a boolean
    }
    assert [(r.field, r.kind, r.count) for r in result.redactions] == [
        ("credentials", "secret", 1), ("password", "secret", 1), ("pin_token", "secret", 1),
    ]
    assert "hunter2" not in repr(result), "a key below a secret name is neither kept nor recorded as a field"


def test_redaction_leaves_its_input_alone_and_is_idempotent():
    value = {"a": ["x@example.com", {"password": "p", "ip": "10.0.0.1"}], "amqp://u:p@h": 1}
    before = copy.deepcopy(value)
    once = redact(value)
    assert value == before, "the caller's value is not changed"
    twice = redact(once.value)
    assert twice.value == once.value and twice.redactions == (), "a marker is never redacted again"


# --------------------------------------------------------------------------- decisions: false positives and their limits


@pytest.mark.parametrize("text", [
    "RabbitMQ 3.13.7 on Erlang 26.2",          # versions of two and three parts (four: see the next test)
    "build 1.2.3.4.5",                         # five parts is never an address
    "v1.2.3.4",                                # a version written with its v
    "2026-03-02T09:14:00Z and 09:14:00.123",    # times have colons, not addresses
    "mac 00:1a:2b:3c:4d:5e",                   # a MAC address is not an IP address
    "node rabbit@orders-eu-1-a",               # an Erlang short node name is not an e-mail
    "routing_key=orders.created token_ttl=3600 consumer_tag=amq.ctag-1",  # not secrets, by the last word of their name
    "Basic instructions: the Bearer of bad news", # prose after a scheme word
    "std::vector and a :: b",                  # double colons alone
    "rates 41.3/s, 0.0/s, 182.3/s",
])
def test_things_that_only_look_sensitive_are_kept(text):
    assert redacted(text) == (text, {})


def test_a_dotted_quad_is_a_version_only_in_a_field_named_for_one():
    assert redact({"erlang_version": "26.2.5.3", "version": "1.2.3.4"}).redactions == ()
    assert redact({"build": "26.2.5.3"}).value == {"build": "[redacted:ipv4]"}, "elsewhere it cannot be told from an address"


def test_an_erlang_long_node_name_is_redacted_as_an_email():
    """A decision: ``rabbit@host.example.com`` has an e-mail address's shape; the lab's data uses short names."""
    assert redacted("rabbit@node-1.example.com") == ("[redacted:email]", {"email": 1})


@pytest.mark.parametrize(("name", "secret"), [
    ("password", True), ("clientSecret", True), ("X-Api-Key", True), ("refresh_token", True), ("Set-Cookie", True),
    ("APIKey", True), ("PRIVATE_KEY", True), ("Proxy-Authorization", True), ("db.password", True),
    ("routing_key", False), ("x-dead-letter-routing-key", False), ("token_ttl", False), ("consumer_tag", False),
    ("auth_mechanism", False), ("key", False),
    # Every word counts, not only the last; digits after it do not.
    ("dbPassword2", True), ("api_key_value", True), ("secret_value", True), ("X-Amz-Signature", True),
    ("X-Amz-Credential", True), ("sig", True), ("DB_PASSWORD", True), ("sessionId", True), ("x" * 300 + "_password", True),
    ("passwordHash", True),  # a decision: a password's hash can be cracked offline
    # A word after the secret word that describes it: not a secret.
    ("password_min_length", False), ("token_url", False), ("signature_version", False), ("secretName", False),
    ("session_timeout", False), ("prompt_tokens", False), ("amqp://[redacted:uri-credentials]@h", False),
])
def test_secret_field_names_are_judged_by_their_words(name, secret):
    assert is_secret_name(name) is secret


def test_a_token_split_across_fields_is_caught_only_where_each_piece_is_recognisable():
    """A decision: by its field's name, or by its shape; a random piece in an innocent field is not caught."""
    jwt_head, jwt_body, signature = "eyJhbGciOiJIUzI1NiJ9", "eyJzdWIiOiJtb25pdG9yIn0", "c2lnbmF0dXJlLXBhcnQ"
    by_name = redact({"token_part_1_token": jwt_head, "token_part_2_token": signature})
    assert by_name.value == {"token_part_1_token": "[redacted:secret]", "token_part_2_token": "[redacted:secret]"}
    by_shape = redact({"part1": jwt_head, "part2": jwt_body, "part3": signature})
    assert by_shape.value == {"part1": "[redacted:token]", "part2": "[redacted:token]", "part3": signature}, (
        "the signature alone is an ordinary string: redaction cannot know it belongs to a token"
    )
    url = redact({"scheme": "amqp://", "userinfo": "svc:hunter2", "host": "@10.0.0.7"})
    assert url.value == {"scheme": "amqp://", "userinfo": "svc:hunter2", "host": "@[redacted:ipv4]"}, (
        "credentials split from their URI are not recognisable as such"
    )


# --------------------------------------------------------------------------- hostile input


def test_keys_are_redacted_too_and_two_that_collide_both_survive():
    result = redact({"contacts": {"ann@example.com": "primary", "bob@example.com": "backup"}})
    assert result.value == {"contacts": {"[redacted:email]": "primary", "[redacted:email]#2": "backup"}}
    assert [(r.field, r.kind, r.count) for r in result.redactions] == [("contacts.(key)", "email", 2)]


def nested(levels: int) -> str:
    value: object = "admin@example.com"
    for level in range(levels):
        value = {f"l{level}": [value]}
    return json.dumps(value)


def test_deeply_nested_values_are_reached_and_their_path_recorded():
    result = redact_document(nested(30))  # 60 levels of JSON: walked field by field
    assert "admin@example.com" not in result.value and "[redacted:email]" in result.value
    (record,) = result.redactions
    assert record.kind == "email" and record.field.startswith("l29.0.l28.0.") and len(record.field) <= 200


def test_a_document_nested_deeper_than_json_is_read_is_still_redacted_as_text():
    result = redact_document(nested(200))  # 400 levels: more than labkit parses as JSON
    assert "admin@example.com" not in result.value
    assert [(r.field, r.kind) for r in result.redactions] == [("(text)", "email")]


def test_unicode_text_is_kept_byte_for_byte_around_what_is_replaced():
    text = "Störung 🐇 bei josé@exämple.de — Адрес 192.0.2.44, ＬＡＢ alice＠example.com ✓"
    out, counts = redacted(text)
    assert out == "Störung 🐇 bei [redacted:email] — Адрес [redacted:ipv4], ＬＡＢ [redacted:email] ✓"
    assert counts == {"email": 2, "ipv4": 1}
    assert redacted("１９２．０．２．４４") == ("１９２．０．２．４４", {}), "a decision: full-width digits are not normalised"


def test_a_document_that_is_not_json_is_scanned_as_text():
    result = redact_document("ERROR login failed for ops@example.com from 10.9.8.7\n")
    assert result.value == "ERROR login failed for [redacted:email] from [redacted:ipv4]\n"
    assert {(r.field, r.kind) for r in result.redactions} == {("(text)", "email"), ("(text)", "ipv4")}


def test_a_million_sensitive_fields_leave_a_bounded_record():
    value = {f"user{n}": f"u{n}@example.com" for n in range(20_000)}
    result = redact(value)
    assert result.by_kind() == {"email": 20_000}
    assert len(result.redactions) == MAX_RECORDED_FIELDS + 1
    assert result.redactions[0] == labkit.redaction.Redaction(OTHER_FIELDS, "email", 20_000 - MAX_RECORDED_FIELDS)


HOSTILE = {
    "letters": "a" * (1 << 18),
    "dots": "a." * (1 << 17),
    "colons then a letter": "f:" * (1 << 17) + "g",
    "at signs": "@a" * (1 << 17),
    "dotted runs before at": ("a." * 500 + "@") * 260,
    "a scheme and no at": "a://" + "x" * (1 << 18),
    "name separators": "ab:" * 87_000,
    "equals": "a=" * (1 << 17),
    "many addresses": "10.0.0.1 " * 29_000,
    "many uris": "a://b@" * 43_000,
    "a long secret": "password=" + "p" * (1 << 18),
    "an e-mail domain without a dot": "x@" + "a" * (1 << 18),
    "address-like runs": "1.2.3." * 43_000 + "x",
}


@pytest.mark.parametrize("shape", HOSTILE)
def test_hostile_text_is_redacted_in_linear_time(shape):
    """256 KB of the shapes that make regular expressions backtrack: each well under two seconds.

    CPU seconds of this process, not wall-clock seconds: other programs on a loaded machine
    (``make test-under-load``) stretch the wall clock, never this count. A backtracking
    pattern costs minutes on this input, so the limit still tells linear from not.
    """
    text = HOSTILE[shape]
    began = time.process_time()
    out, _ = redact_text(text)
    assert time.process_time() - began < 2.0
    again, counts = redact_text(out)
    assert again == out and not counts


# --------------------------------------------------------------------------- through the real workflow


@pytest.mark.parametrize("incident", sorted(SHIPPED_SECRETS))
def test_a_shipped_incidents_secrets_never_reach_the_database_files(lab, cli, incident, query):
    """A real run in a child process; then no byte of any secret is in the database or its log files."""
    raw = (REPO / "data" / "incidents" / f"{incident}.json").read_text(encoding="utf-8")
    assert all(secret in raw for secret in SHIPPED_SECRETS[incident]), "the incident carries them"
    assert cli("run", "--db", lab.db, "--incident", incident).returncode == 0
    files = [path for path in lab.folder.iterdir() if path.is_file()]
    assert lab.db in files
    for path in files:
        content = path.read_bytes()
        for secret in SHIPPED_SECRETS[incident]:
            assert secret.encode() not in content, f"{secret!r} reached {path.name}"
    kinds = {kind for (kind,) in query(lab.db, "SELECT DISTINCT kind FROM redactions WHERE incident = ?", (incident,))}
    assert kinds == ({"uri-credentials", "ipv4", "email"} if incident == "INC-1015" else {"secret", "ipv6", "email"})
    fields = {field for (field,) in query(lab.db, "SELECT field FROM redactions WHERE incident = ?", (incident,))}
    assert ("probe.url" in fields) if incident == "INC-1015" else ("queue.consumer_details.0.channel_details.peer_host" in fields)
    kept = query(lab.db, "SELECT body FROM diagnostics WHERE incident = ?", (incident,))[0][0]
    assert "[redacted:" in kept and json.loads(kept)["queue"]["name"], "the rest of the diagnostic is kept, readable"


class _ResponseWith:
    """A provider whose answer itself carries a value to redact (the contract allows any queue name)."""

    decision_inputs = {"provider": "test-double", "rules_revision": 1, "prompt_revision": None}

    def __init__(self, inner: labkit.ReferenceProvider, queue_name: str):
        self.inner, self.queue_name = inner, queue_name

    def incidents(self) -> list[str]:
        return self.inner.incidents()

    def read(self, incident: str) -> bytes:
        body = json.loads(self.inner.read(incident))
        body["queue"]["name"] = self.queue_name
        return json.dumps(body).encode()


def test_the_evidence_summary_is_redacted_before_it_is_stored_and_its_digest_is_of_what_is_stored(lab, conn):
    provider = _ResponseWith(lab.provider(), "replies/ops@example.com")
    coordinator = lab.coordinator(conn, provider=provider)
    coordinator.drive("INC-1002")
    evidence = labkit.store.load_evidence_txn(conn, "INC-1002")
    assert evidence.body["queue"]["name"] == "replies/[redacted:email]"
    assert evidence.digest == labkit.store.evidence_digest(evidence.body)
    receipt = labkit.receipts.find_receipt_txn(conn, "INC-1002")
    assert receipt.report["queue"] == "replies/[redacted:email]"
    assert "ops@example.com" not in json.dumps(labkit.store.snapshot(conn))
    rows = conn.execute("SELECT part, field, kind, count FROM redactions WHERE incident = 'INC-1002'").fetchall()
    assert {tuple(row) for row in rows} >= {("evidence", "queue.name", "email", 1)}


def test_a_redaction_that_would_break_the_contract_refuses_the_read(lab, conn):
    """A queue name at its 255-character limit, ending in an address: the marker would make it too long to store."""
    name = "q" * 246 + " 10.0.0.1"
    coordinator = lab.coordinator(conn, provider=_ResponseWith(lab.provider(), name))
    coordinator.start("INC-1002")
    before = labkit.store.snapshot(conn)
    with pytest.raises(labkit.errors.EvidenceRejected) as refused:
        coordinator.drive("INC-1002")
    assert refused.value.field == "queue.name" and refused.value.rule == "schema:maxLength"
    assert labkit.store.snapshot(conn) == before, "neither the value nor a summary the contract never accepted is stored"
