"""Redaction: sensitive values are replaced by a marker before anything is stored.

A raw diagnostic is telemetry, and telemetry leaks: a log line quotes a connection string
with its password, an alerting probe echoes its ``Authorization`` header, a consumer's
channel names the address it connects from, an alert names the engineer to page. labkit
keeps raw diagnostics apart from the evidence (:mod:`labkit.evidence`), but kept apart
is still kept, so every value below is replaced by ``[redacted:KIND]`` first, in the
evidence and in the raw diagnostic alike:

=================== ==========================================================================
kind                what is recognised
=================== ==========================================================================
``uri-credentials`` the user-info of a URI: ``amqp://svc:pw@host`` keeps ``amqp://`` and ``@host``
``secret``          the value of a field whose name says it holds a secret (``password``,
                    ``client_secret``, ``X-Api-Key``, ``Authorization``, ``Cookie``, any
                    ``..._token``), in JSON or as ``name=value`` / ``name: value`` in text
``token``           a bearer or basic credential (``Bearer eyJ...``, ``Basic bW9u...``) and
                    anything shaped like a JSON Web Token (``eyJ...``), wherever it appears
``email``           an e-mail address (Unicode letters allowed, a full-width ``＠`` too)
``ipv4``            a dotted quad of octets 0-255, standing alone (not inside ``1.2.3.4.5``)
``ipv6``            anything the standard library accepts as an IPv6 address, brackets or not
=================== ==========================================================================

What is recorded is where and what, never the value: one :class:`Redaction` per
(field, kind) with a count. Field names are scanned too (a key can be an e-mail address),
so a recorded path never carries a secret either.

Decisions, each tested in ``tests/mechanisms/test_redaction.py``:

- A dotted quad in a field whose name says ``version`` is a version, not an address, and is
  kept; anywhere else ``1.2.3.4`` cannot be told from an address and is redacted. Version
  numbers with three parts (``3.13.7``) or five never look like one.
- An Erlang long node name (``rabbit@host.example.com``) has an e-mail address's shape and is
  redacted as one; short names (``rabbit@orders-eu-1-a``, what the lab's data uses) are kept.
- A routing key, a consumer tag, a token's time to live (``token_ttl``) are not secrets: the
  *last word* of a field's name decides, so ``x-dead-letter-routing-key`` is kept.
- A secret split across fields is caught only where each piece is recognisable on its own: by
  its field's name, or by its shape (each half of a JSON Web Token starts ``eyJ``). A random
  string in a field with an innocent name cannot be recognised, and is not.
- The text is not normalised (NFKC) before matching: full-width digits are not read as an
  address. Matching is linear in the input: no pattern can backtrack without bound.

Taught in 11_capacity_and_retention.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .jsontext import JsonProblem, canonical_json, strict_loads

KINDS = ("uri-credentials", "secret", "token", "email", "ipv4", "ipv6")

#: At most this many (field, kind) entries are recorded per document; the rest are counted
#: under ``OTHER_FIELDS``, so a hostile document with a million keys gets a bounded record.
MAX_RECORDED_FIELDS = 64
OTHER_FIELDS = "(other fields)"
#: A recorded field path is cut to this many characters.
MAX_FIELD_CHARS = 200


def marker(kind: str) -> str:
    """What a value of ``kind`` is replaced by: ``[redacted:email]``."""
    return f"[redacted:{kind}]"


_MARKER = re.compile(r"\[redacted:(?:" + "|".join(map(re.escape, KINDS)) + r")\]")


@dataclass(frozen=True)
class Redaction:
    """What was redacted where: a field path, a kind and how many values; never the value.

    ``field`` is a dotted path (``queue.consumer_details.0.channel_details.peer_host``),
    ``(text)`` for a document that is not JSON, or :data:`OTHER_FIELDS`.
    """

    field: str
    kind: str
    count: int


@dataclass(frozen=True)
class Redacted:
    """A value with its sensitive parts replaced, and the record of what was replaced."""

    value: Any
    redactions: tuple[Redaction, ...]

    @property
    def count(self) -> int:
        """How many values were replaced, in all."""
        return sum(r.count for r in self.redactions)

    def by_kind(self) -> dict[str, int]:
        """How many values of each kind were replaced."""
        totals: Counter[str] = Counter()
        for r in self.redactions:
            totals[r.kind] += r.count
        return dict(sorted(totals.items()))


# --------------------------------------------------------------------------- field names

#: A field is secret when the last word of its name is one of these ...
_SECRET_WORDS = frozenset({
    "password", "passwords", "passwd", "pwd", "passphrase", "secret", "secrets", "token", "tokens",
    "authorization", "cookie", "cookies", "credential", "credentials", "apikey", "privatekey",
})
#: ... or its last two words are one of these.
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("signing", "key")})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def is_secret_name(name: str) -> bool:
    """Whether a field called ``name`` holds a secret, judged by the last word(s) of its name.

    ``password``, ``clientSecret``, ``X-Api-Key``, ``refresh_token``, ``Set-Cookie``: yes.
    ``routing_key``, ``token_ttl``, ``consumer_tag``, ``auth_mechanism``: no.
    """
    words = [w.lower() for w in _WORD.findall(name[:MAX_FIELD_CHARS])]
    if not words:
        return False
    return words[-1] in _SECRET_WORDS or tuple(words[-2:]) in _SECRET_PAIRS


# --------------------------------------------------------------------------- text patterns
#
# Every pattern is built so that the regular-expression engine cannot backtrack without
# bound: character classes that cannot overlap with what follows them, and lookbehinds that
# let a match start only at the beginning of a run of characters. tests/mechanisms/test_redaction.py
# times them on a megabyte of hostile text.

_URI_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)([^\s/?#\[\]]*)@")
_HEADER_LINE = re.compile(r"(?im)\b((?:proxy-)?authorization|x-api-key|x-auth-token|set-cookie|cookie)(\s*[:=]\s*)([^\r\n\"',]+)")
_SCHEME_TOKEN = re.compile(r"(?i)\b(bearer|basic|token)(\s+)([A-Za-z0-9\-._~+/]{8,}=*)")
#: ``name=value`` or ``name: value``. Only the name and the separator are matched; the value
#: is read after a secret name alone (_SECRET_VALUE), so ``note: password=x`` still finds
#: ``password``, and a long run of ``a:a:a:`` costs no more than its length.
_NAMED_VALUE = re.compile(r"(?<![\w\-.])([A-Za-z][\w\-.]{0,63})(\s*=\s*|:(?!//)[ \t]*)")
_SECRET_VALUE = re.compile(r"(\"?)([^\s\"'&;,<>]+)")
_JWT = re.compile(r"(?<![\w\-])eyJ[A-Za-z0-9_\-]{10,}(?:\.[A-Za-z0-9_\-]*){0,2}")
_EMAIL = re.compile(r"(?<![\w.%+\-])[\w.%+\-]+[@\uFF20](?:[^\W_][\w\-]*\.)+[^\W\d_]{2,}(?![\w\-])")
#: A whole run of address characters that holds a colon; the standard library decides.
_IPV6_CANDIDATE = re.compile(r"(?<![0-9A-Za-z:.%])(?=[0-9A-Za-z.%]*:)[0-9A-Za-z:.%]+")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}(?![\w]|\.[0-9])")
_CREDENTIAL_CHARS = re.compile(r"[0-9+/=_]")
#: Text without any of these cannot hold anything above: most strings skip the patterns.
_TRIGGER = re.compile(r"(?i)[@:.=\uFF20]|eyJ|bearer|basic|token")


def _is_version_field(field: str) -> bool:
    last = field.rsplit(".", 1)[-1]
    return "version" in last.lower()


def redact_text(text: str, field: str = "") -> tuple[str, Counter[str]]:
    """``text`` with every sensitive value replaced, and how many of each kind.

    ``field`` is the path of the field the text sits in; it decides only whether a dotted
    quad is a version number (see the module's decisions).
    """
    counts: Counter[str] = Counter()
    if not text or not _TRIGGER.search(text):
        return text, counts

    def sub(pattern: re.Pattern, replace: Callable[[re.Match], str | None], source: str) -> str:
        def one(match: re.Match) -> str:
            replaced = replace(match)
            return match.group(0) if replaced is None else replaced

        return pattern.sub(one, source)

    def userinfo(m: re.Match) -> str | None:
        info = m.group(2)
        if not info or _MARKER.fullmatch(info):
            return None
        counts["uri-credentials"] += 1
        return f"{m.group(1)}{marker('uri-credentials')}@"

    def header(m: re.Match) -> str | None:
        value = m.group(3).strip()
        if not value or _MARKER.fullmatch(value) or _MARKER.match(value.split()[-1]):
            return None
        counts["token"] += 1
        return f"{m.group(1)}{m.group(2)}{marker('token')}"

    def scheme(m: re.Match) -> str | None:
        # "Basic instructions" is prose, "Basic bW9uaXRvcg==" a credential: base64 and
        # bearer tokens carry a digit or one of + / = _ almost always; prose words do not.
        if not _CREDENTIAL_CHARS.search(m.group(3)):
            return None
        counts["token"] += 1
        return f"{m.group(1)}{m.group(2)}{marker('token')}"

    def named(source: str) -> str:
        # Not re.sub: a secret's value lies after the match (see _NAMED_VALUE).
        out, pos = [], 0
        for m in _NAMED_VALUE.finditer(source):
            if m.start() < pos or not is_secret_name(m.group(1)):
                continue
            found = _SECRET_VALUE.match(source, m.end())
            if found is None:
                continue
            quote, value = found.group(1), found.group(2)
            if value.startswith("[") or value.lower() in ("bearer", "basic", "token"):
                continue  # already a marker, or the scheme word of a credential replaced above
            counts["secret"] += 1
            out += [source[pos:m.end()], quote, marker("secret")]
            pos = m.end() + len(quote) + len(value)
        return "".join(out) + source[pos:]

    def jwt(m: re.Match) -> str:
        counts["token"] += 1
        return marker("token")

    def email(m: re.Match) -> str:
        counts["email"] += 1
        return marker("email")

    def ipv6(m: re.Match) -> str | None:
        candidate = m.group(0)
        core = candidate.rstrip(".")  # the full stop that ends a sentence
        address = core.split("%", 1)[0]  # a zone (fe80::1%eth0) names an interface, not a host
        if address.count(":") < 2 or not any(c in "0123456789abcdefABCDEF" for c in address):
            return None
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return None
        counts["ipv6"] += 1
        return marker("ipv6") + candidate[len(core):]

    def ipv4(m: re.Match) -> str:
        counts["ipv4"] += 1
        return marker("ipv4")

    # Order matters: credentials inside a URI before the e-mail shape they contain
    # (``user:pw@host.example.com``); headers before the bearer token inside them; IPv6
    # before IPv4, since an IPv6 address may end in a dotted quad (``::ffff:10.0.0.5``).
    text = sub(_URI_USERINFO, userinfo, text)
    text = sub(_HEADER_LINE, header, text)
    text = sub(_SCHEME_TOKEN, scheme, text)
    text = named(text)
    text = sub(_JWT, jwt, text)
    text = sub(_EMAIL, email, text)
    text = sub(_IPV6_CANDIDATE, ipv6, text)
    if not _is_version_field(field):
        text = sub(_IPV4, ipv4, text)
    return text, counts


# --------------------------------------------------------------------------- documents


class _Record:
    """Counts per (field, kind), bounded: past MAX_RECORDED_FIELDS entries, per kind only."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], int] = {}

    def add(self, field: str, counts: Counter[str]) -> None:
        shown = field if len(field) <= MAX_FIELD_CHARS else field[: MAX_FIELD_CHARS - 3] + "..."
        for kind, count in counts.items():
            key = (shown, kind)
            if key not in self.entries and len(self.entries) >= MAX_RECORDED_FIELDS:
                key = (OTHER_FIELDS, kind)
            self.entries[key] = self.entries.get(key, 0) + count

    def redactions(self) -> tuple[Redaction, ...]:
        return tuple(Redaction(field, kind, count) for (field, kind), count in sorted(self.entries.items()))


def redact(value: Any, *, field: str = "") -> Redacted:
    """A copy of the JSON value ``value`` with sensitive strings, keys and secret fields replaced.

    ``value`` is what :func:`labkit.jsontext.strict_loads` returns (dicts, lists, strings,
    numbers, booleans, None); it is not changed. ``field`` names where the value sits, for
    the record. A value under a secret field name is replaced whole (every string or number
    in it, whatever it looks like); None, true and false are left: they hide nothing.
    """
    record = _Record()
    redacted = _walk(value, field, record, secret=False)
    return Redacted(redacted, record.redactions())


def redact_document(text: str) -> Redacted:
    """Redact a raw diagnostic given as text; the result's value is the redacted text to store.

    JSON is walked field by field (so the record names fields) and written back as canonical
    JSON; anything else is scanned whole, and its record names the field ``(text)``.
    """
    try:
        parsed = strict_loads(text, max_depth=64)
    except JsonProblem:
        record = _Record()
        redacted, counts = redact_text(text)
        record.add("(text)", counts)
        return Redacted(redacted, record.redactions())
    walked = redact(parsed)
    return Redacted(canonical_json(walked.value), walked.redactions)


def _join(field: str, part: str) -> str:
    return f"{field}.{part}" if field else part


def _walk(value: Any, field: str, record: _Record, *, secret: bool) -> Any:
    if isinstance(value, str):
        if secret and value:
            if _MARKER.fullmatch(value):
                return value  # redacted already
            record.add(field, Counter({"secret": 1}))
            return marker("secret")
        redacted, counts = redact_text(value, field)
        record.add(field, counts)
        return redacted
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        if secret:
            record.add(field, Counter({"secret": 1}))
            return marker("secret")
        return value
    if isinstance(value, list):
        return [_walk(item, _join(field, str(index)), record, secret=secret) for index, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name, counts = redact_text(key, _join(field, "(key)"))
            if counts:
                record.add(_join(field, "(key)"), counts)
                name = _unique(name, out)
            path = _join(field, name)
            out[name] = _walk(item, path, record, secret=secret or is_secret_name(key))
        return out
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _unique(name: str, taken: dict[str, Any]) -> str:
    """Two keys that redact to the same text (two e-mail addresses) must both survive."""
    if name not in taken:
        return name
    number = 2
    while f"{name}#{number}" in taken:
        number += 1
    return f"{name}#{number}"
