"""Redaction: what counts as a secret, and how it is replaced before anything is stored.

A raw diagnostic is telemetry, and telemetry leaks: a log line quotes a connection string
with its password, an alerting probe echoes its ``Authorization`` header, a consumer's
channel names the address it connects from, an alert names the engineer to page. labkit
keeps raw diagnostics apart from the evidence (:mod:`labkit.evidence`), but kept apart is
still kept, so every value below is replaced by ``[redacted:KIND]`` first: in the evidence,
in the raw diagnostic, in a lease event's detail (a refused answer quoted in an error).

The contract: three ways to recognise a secret
==============================================

**By name.** A field or key names a secret when one of its words (split at ``_``, ``-``,
``.``, spaces, digits and camelCase, so ``dbPassword2`` is *db, password, 2*) is a secret
word (:data:`SECRET_WORDS`: password, passwd, pwd, passphrase, secret, token, auth,
authorization, cookie, session, credential(s), signature, sig, jwt, ...), ends in one
(``dbpassword``, ``accesstoken``), or two of them make a pair (*api key*, *private key*,
*access key*, ...). It does not when the next word says the field *describes* the secret
rather than holding it (:data:`QUALIFIERS`: ``token_ttl``, ``auth_mechanism``,
``password_min_length``, ``token_url``, ``signature_version``). Digits after the word do
not count: ``dbPassword2`` is a password. The whole name is read, however long.

**By structure.** Everything under a secret name is replaced, whatever it holds: a string,
a number, a whole object or list becomes one marker, so no key or value below it is kept or
recorded. In text, a secret name followed by ``=``, ``:``, ``=>`` or ``:=`` (spaces allowed
around it, the name quoted or not, ``--password VALUE`` too) has its value replaced: a quoted
value (``'x'``, ``"x"``, ``\\"x\\"`` inside an escaped JSON string) to its closing quote; a
value in brackets (a JSON body, a Python ``repr``) to its closing bracket; an unquoted value
after ``=`` to the first space or one of ``& ; , " ' < > ) ] }``, after ``:`` to the end of
its line or a closing bracket (a bracket or quote it opens is read to its close first). A
value that never closes is replaced to the end of the text. The name/value shape
(``{"name": "DB_PASSWORD", "value": "x"}``, Kubernetes' environment, HTTP archives' headers;
``key`` and ``ParameterKey`` too) is a secret field named by its ``name``, in JSON and in
text, in either order.

**By shape**, wherever it appears, under any name or none: the user-info of a URI; a bearer
or basic credential; a JSON Web Token (``eyJ...``); a PEM private key block (``-----BEGIN
... PRIVATE KEY-----`` to its ``END`` line, or to the end of its base64 if the block was cut
short); a random-looking token: a run of at least :data:`TOKEN_MIN_CHARS` characters of
``A-Z a-z 0-9 + / _ -`` that holds a capital, a small letter and a digit, has at least
:data:`TOKEN_MIN_BITS` bits of entropy per character, and changes between those classes at
least :data:`TOKEN_MIN_SWITCHES` of the time (what ``AbstractProxyFactoryBean2`` and
``payments-eu-1-refund-requests-Q2-2026`` do not). Besides secrets, e-mail addresses and IP
addresses are replaced, as personal data.

=================== ==========================================================================
kind                what is recognised
=================== ==========================================================================
``uri-credentials`` the user-info of a URI: ``amqp://svc:pw@host`` keeps ``amqp://`` and ``@host``
``secret``          a value held by a secret name, in JSON or in text (the rules above)
``private-key``     a PEM private key block
``token``           a credential recognised by its shape: bearer or basic, a JSON Web Token,
                    a random-looking token, a header such as ``Authorization: ...`` in text
``email``           an e-mail address (Unicode letters allowed, a full-width ``＠`` too)
``ipv4``            a dotted quad of octets 0-255, standing alone (not inside ``1.2.3.4.5``)
``ipv6``            anything the standard library accepts as an IPv6 address, brackets or not
=================== ==========================================================================

What is recorded is where and what, never the value: one :class:`Redaction` per
(field, kind) with a count. Field names are redacted like any text (a key can be an e-mail
address or a token), and nothing below a secret name is recorded, so a recorded path never
carries a secret either (:func:`redact_field_path` cleans a path written before that rule).

Decisions, each tested in ``tests/mechanisms/test_redaction.py``:

- A dotted quad in a field whose name says ``version`` is a version, not an address, and is
  kept; anywhere else ``1.2.3.4`` cannot be told from an address and is redacted. Version
  numbers with three parts (``3.13.7``) or five never look like one.
- An Erlang long node name (``rabbit@host.example.com``) has an e-mail address's shape and is
  redacted as one; short names (``rabbit@orders-eu-1-a``, what the lab's data uses) are kept.
- A routing key, a consumer tag, a token's time to live (``token_ttl``), a count of a model's
  tokens (``prompt_tokens``: *tokens* is not a secret word) are not secrets. A password's hash
  (``passwordHash``) is: it can be cracked offline.
- RabbitMQ's generated names (``amq.ctag-0aK4wT8rLd2yBq6NcGv3Pz``, 22 random characters) are
  too short to look like a token; hex strings (digests, ids) and base32 never do (no small
  letter, or no capital). A hex or base32 key is therefore found only by its name.
- A secret split across fields is caught only where each piece is recognisable on its own: by
  its field's name, or by its shape (each half of a JSON Web Token starts ``eyJ``). A random
  string in a field with an innocent name cannot be recognised, and is not.
- Over-redaction is preferred to a leak: ``password: a, user: b`` loses ``user: b`` too.
- The text is not normalised (NFKC) before matching: full-width digits are not read as an
  address. Matching is linear in the input: no pattern can backtrack without bound.

Taught in 11_capacity_and_retention.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Any

from .jsontext import JsonProblem, canonical_json, strict_loads

KINDS = ("uri-credentials", "secret", "private-key", "token", "email", "ipv4", "ipv6")

#: At most this many (field, kind) entries are recorded per document; the rest are counted
#: under ``OTHER_FIELDS``, so a hostile document with a million keys gets a bounded record.
MAX_RECORDED_FIELDS = 64
OTHER_FIELDS = "(other fields)"
#: A recorded field path is cut to this many characters.
MAX_FIELD_CHARS = 200
#: Strings (and names) up to this many characters have their redaction remembered (:func:`redact_text`).
MEMO_MAX_CHARS = 256


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

#: A name holds a secret when one of its words is one of these (or ends in one of
#: :data:`SECRET_ENDINGS`, or two words make one of :data:`SECRET_PAIRS`) ...
SECRET_WORDS = frozenset({
    "password", "passwords", "passwd", "pwd", "passphrase", "secret", "secrets", "token", "auth", "authorization",
    "authorisation", "cookie", "cookies", "session", "credential", "credentials", "creds", "apikey", "privatekey",
    "signature", "sig", "jwt", "bearer",
})
SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "privatekey", "credential", "credentials")
SECRET_PAIRS = frozenset({
    ("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("signing", "key"), ("encryption", "key"),
    ("master", "key"), ("session", "key"), ("account", "key"), ("client", "key"),
})
#: ... unless the word after it says the field describes the secret rather than holding it.
QUALIFIERS = frozenset({
    "ttl", "expiry", "expires", "expire", "expiration", "expired", "age", "lifetime", "timeout", "seconds", "ms", "interval",
    "type", "kind", "mechanism", "mechanisms", "method", "methods", "policy", "length", "len", "min", "max", "required",
    "enabled", "disabled", "count", "used", "total", "url", "uri", "endpoint", "path", "file", "filename", "name", "names",
    "ref", "header", "version", "algorithm", "format",
})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def is_secret_name(name: str) -> bool:
    """Whether a field called ``name`` holds a secret (the module's rule *by name*).

    ``password``, ``dbPassword2``, ``api_key_value``, ``X-Amz-Signature``, ``Set-Cookie``: yes.
    ``routing_key``, ``token_ttl``, ``consumer_tag``, ``auth_mechanism``: no.
    """
    if len(name) <= MEMO_MAX_CHARS:
        return _secret_name(name)
    return _secret_words(name)


@lru_cache(maxsize=8192)  # the same key names come back in every diagnostic; a long one is not kept
def _secret_name(name: str) -> bool:
    return _secret_words(name)


def _secret_words(name: str) -> bool:
    # A marker is not part of a name: ``amqp://[redacted:uri-credentials]@h`` names no credential.
    words = [w.lower() for w in _WORD.findall(_MARKER.sub(" ", name))]
    last = -1
    for index, word in enumerate(words):
        if word in SECRET_WORDS or word.endswith(SECRET_ENDINGS) or (index and (words[index - 1], word) in SECRET_PAIRS):
            last = index
    if last < 0:
        return False
    after = [word for word in words[last + 1:] if not word.isdigit()]
    return not after or after[0] not in QUALIFIERS


def _flat(key: str) -> str:
    if len(key) <= MEMO_MAX_CHARS:
        return _flat_short(key)
    return _flatten(key)


@lru_cache(maxsize=8192)  # every object of a diagnostic asks this of each of its keys
def _flat_short(key: str) -> str:
    return _flatten(key)


def _flatten(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


#: The name/value shape: an object whose name-field names a secret holds it in its value-field.
_NAME_FIELDS = frozenset({"name", "key", "parametername", "parameterkey", "variable"})
_VALUE_FIELDS = frozenset({"value", "parametervalue"})


def _names_a_secret(value: dict) -> bool:
    for key, item in value.items():  # a loop, not any(): asked of every object of every document
        if _flat(key) in _NAME_FIELDS and isinstance(item, str) and is_secret_name(item):
            return True
    return False


# --------------------------------------------------------------------------- text patterns
#
# Every pattern is built so that the regular-expression engine cannot backtrack without
# bound: character classes that cannot overlap with what follows them, and lookbehinds that
# let a match start only at the beginning of a run of characters. Values are read by plain
# loops that each character passes once. tests/mechanisms/test_redaction.py times them on a
# quarter megabyte of hostile text.

_URI_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)([^\s/?#\[\]]*)@")
#: A credential header's value: a scheme and its credential (``Bearer abc``), or cookies joined by
#: ``;``. It stops there, not at the line's end: a value that ran on would swallow the name of the
#: next pair (``password=``) and leave that pair's value behind, unrecognised.
_HEADER_LINE = re.compile(
    r"(?im)\b((?:proxy-)?authorization|x-api-key|x-auth-token|set-cookie|cookie)(\s*(?>=>|:=|[:=])\s*)"
    r"""([^\s"',;]+(?:(?:;[ \t]*|[ \t]+)[^\s"',;]+)?(?:;[ \t]*[^\s"',;]+)*)"""
)
_SCHEME_TOKEN = re.compile(r"(?i)\b(bearer|basic|token)(\s+)([A-Za-z0-9\-._~+/]{8,}=*)")
#: A name and its separator: a quoted name ("password", 'password', \"password\") or a bare one
#: (``password``, ``$password``, ``--password``; its closing quote alone too, when what opened it
#: was replaced by an earlier rule), then ``=``, ``:``, ``=>`` or ``:=``; after a
#: ``--flag``, spaces alone. Only the name and the separator are matched; the value is read by
#: :func:`_value_span`, so ``note: password=x`` still finds ``password``.
_PAIR = re.compile(
    r"""(?:(?P<q>\\?["'])(?P<qkey>[^"'\\\r\n]{1,256})(?P=q)"""
    r"""|(?<![\w\-.])(?P<flag>--)?(?P<key>[$@]?[A-Za-z_][\w\-.]*)(?:\\?["'])?)"""
    r"""(?P<sep>[ \t]*(?:=>|:=|=|:(?!//))[ \t]*|(?(flag)[ \t]+|(?!)))"""
)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
#: A block cut short: its body, as far as base64, header lines and escaped line breaks go.
_PEM_BODY = re.compile(r"(?:[A-Za-z0-9+/=\s:,\-]|\\[nrt])*")
_JWT = re.compile(r"(?<![\w\-])eyJ[A-Za-z0-9_\-]{10,}(?:\.[A-Za-z0-9_\-]*){0,2}")
_TOKEN_RUN = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{32,}={0,2}(?![A-Za-z0-9+/_\-=])")
#: A random-looking token (the module's rule *by shape*): at least this long, ...
TOKEN_MIN_CHARS = 32
#: ... with at least this many bits of Shannon entropy per character, ...
TOKEN_MIN_BITS = 4.0
#: ... and switching between capital, small letter, digit and symbol at least this often.
TOKEN_MIN_SWITCHES = 0.4
_EMAIL = re.compile(r"(?<![\w.%+\-])[\w.%+\-]+[@\uFF20](?:[^\W_][\w\-]*\.)+[^\W\d_]{2,}(?![\w\-])")
#: A whole run of address characters that holds a colon; the standard library decides.
_IPV6_CANDIDATE = re.compile(r"(?<![0-9A-Za-z:.%])(?=[0-9A-Za-z.%]*:)[0-9A-Za-z:.%]+")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}(?![\w]|\.[0-9])")
_CREDENTIAL_CHARS = re.compile(r"[0-9+/=_]")
#: Text without any of these cannot hold anything above: most strings skip the patterns.
_TRIGGER = re.compile(r"(?i)[@:.=\uFF20]|eyJ|bearer|basic|token|-----BEGIN|--|[A-Za-z0-9+/_\-]{32}")
#: Where a value in brackets, or a quoted one, may end: the only characters its loop stops at.
_STRUCTURE = re.compile(r"""[{}\[\]()"'\\]""")
_OPEN, _CLOSE = "{[(", "}])"
#: Where an unquoted value ends, after ``=`` (or a ``--flag``) and after ``:``.
_BARE_AFTER_EQUALS = re.compile(r"""[^\s&;,"'<>)\]}]*""")
_BARE_AFTER_COLON = re.compile(r"[^\r\n)\]}]*")
#: The value of a name that is not a secret is read this far at most (the name/value shape's
#: fields are short scalars): reading each to the end of its line would be quadratic in ``a:a:a:``.
_SCALAR_LIMIT = 1024


def _is_version_field(field: str) -> bool:
    last = field.rsplit(".", 1)[-1]
    return "version" in last.lower()


def looks_random(run: str) -> bool:
    """Whether ``run`` (a run of token characters) is a random-looking token, by the module's rule."""
    core = run.rstrip("=")
    if len(core) < TOKEN_MIN_CHARS:
        return False
    classes = [0 if c.isupper() else 1 if c.islower() else 2 if c.isdigit() else 3 for c in core]
    if not {0, 1, 2} <= set(classes):
        return False
    switches = sum(a != b for a, b in pairwise(classes)) / (len(core) - 1)
    if switches < TOKEN_MIN_SWITCHES:
        return False
    counts = Counter(core)
    bits = -sum(n / len(core) * math.log2(n / len(core)) for n in counts.values())
    return bits >= TOKEN_MIN_BITS


def _already_redacted(value: str) -> bool:
    """A value that is nothing but markers (and the scheme word of a credential replaced before)."""
    rest = _MARKER.sub("", value)
    return rest != value and rest.strip().lower() in ("", "bearer", "basic", "token")


def _quote_end(text: str, start: int, escaped: bool, limit: int | None) -> int | None:
    """The index just past the closing quote of the quoted value opening at ``start``.

    ``escaped``: the value opened with ``\\"`` (a quoted value inside a JSON string), so it
    closes at a ``\\"`` whose backslashes number 1 modulo 4; otherwise at a quote after an even
    number of backslashes. None if it does not close (within ``limit`` characters, if given).
    """
    quote = text[start + 1] if escaped else text[start]
    position = start + (2 if escaped else 1)
    stop = len(text) if limit is None else min(len(text), start + limit)
    while True:
        found = text.find(quote, position, stop)
        if found < 0:
            return None
        slashes = 0
        while found - slashes - 1 >= position and text[found - slashes - 1] == "\\":
            slashes += 1
        if (slashes % 4 == 1) if escaped else (slashes % 2 == 0):
            return found + 1
        position = found + 1


def _bracket_end(text: str, start: int) -> int:
    """The index just past the bracket that closes the one at ``start`` (quotes respected); the text's end if none does."""
    depth, quote, position = 0, "", start
    for found in _STRUCTURE.finditer(text, start):
        char = found.group()
        at = found.start()
        if at < position:
            continue  # the character after a backslash
        if char == "\\":
            position = at + 2
        elif quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
            if depth == 0:
                return at + 1
    return len(text)


_LINE_VALUE_STOPS = re.compile(r"""[\r\n{}\[\]()"']""")


def _line_value_end(text: str, start: int) -> int:
    """Where an unquoted value after ``:`` ends: at its line's end or an unbalanced closing bracket.

    A bracket or a quote opened inside it is read to its close first, across lines if need be,
    so that a value never ends inside a structure it opened: a name inside that structure would
    otherwise lose its value's start to this one and leave the rest of it behind.
    """
    position = start
    while True:
        found = _LINE_VALUE_STOPS.search(text, position)
        if found is None:
            return len(text)
        char, at = found.group(), found.start()
        if char in "\r\n" or char in _CLOSE:
            return at
        if char in _OPEN:
            position = _bracket_end(text, at)
        else:
            escaped = at > start and text[at - 1] == "\\"
            end = _quote_end(text, at - 1 if escaped else at, escaped, None)
            position = len(text) if end is None else end
        if position >= len(text):
            return len(text)


def _value_span(text: str, start: int, after_equals: bool, *, scalar_only: bool = False) -> tuple[int, int, int] | None:
    """Where the value that starts at ``start`` lies: (outer end, inner start, inner end).

    The inner span is what is replaced (inside the quotes of a quoted value); the outer end is
    where reading goes on. None for an empty value, or with ``scalar_only`` for one in brackets
    or a quoted one that does not close soon (a name/value shape's fields are short scalars).
    """
    if start >= len(text):
        return None
    char = text[start]
    escaped = char == "\\" and text[start + 1:start + 2] in ("\"", "'")
    if escaped or char in "\"'":
        end = _quote_end(text, start, escaped, _SCALAR_LIMIT if scalar_only else None)
        opened = start + (2 if escaped else 1)
        if end is None:
            return None if scalar_only else (len(text), opened, len(text))
        closing = end - (2 if escaped else 1)
        return (end, opened, closing) if closing > opened else None
    if char in _OPEN:
        if scalar_only:
            return None
        end = _bracket_end(text, start)
        return end, start, end
    if after_equals or scalar_only:
        limit = start + _SCALAR_LIMIT if scalar_only else len(text)
        bare = (_BARE_AFTER_EQUALS if after_equals else _BARE_AFTER_COLON).match(text, start, limit)
        assert bare is not None  # both patterns match the empty string
        end = bare.end()
    else:
        end = _line_value_end(text, start)
    while end > start and text[end - 1] in " \t":  # trailing spaces before a line break are not the value
        end -= 1
    return (end, start, end) if end > start else None


def _pairs(text: str) -> tuple[str, int]:
    """Replace the values of secret names in ``text`` (the rule *by structure*); how many were replaced.

    Two passes over the names in the text, each linear: the name/value shape first, on its own,
    so that a value replaced to the end of its line cannot hide the ``name:`` of a shape from
    the pass that pairs it with its ``value:``; then every secret name's value.
    """
    spans = _shape_spans(text) + _named_spans(text)
    if not spans:
        return text, 0
    out, position, count = [], 0, 0
    for begin, end in sorted(spans):
        if begin < position:  # overlaps a value already replaced: replace the union
            position = max(position, end)
            continue
        out += [text[position:begin], marker("secret")]
        position, count = end, count + 1
    return "".join(out) + text[position:], count


def _separator(match: re.Match) -> bool:
    """Whether an unquoted value after this name ends at the first space (``=``, ``=>``, a flag) or at the line's end (``:``)."""
    return match.group("sep").strip() != ":"


def _named_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    resume = 0  # nothing before this index is read again: it lies inside a value already replaced
    for match in _PAIR.finditer(text):
        if match.start() < resume:
            continue
        name = match.group("qkey") if match.group("q") else match.group("key").lstrip("$@")
        if not is_secret_name(name):
            continue
        span = _value_span(text, match.end(), _separator(match))
        if span is None:
            continue
        outer, inner_start, inner_end = span
        if not match.group("sep").strip() and text[inner_start] == "-":
            continue  # ``--password --next``: the flag has no value
        if not _already_redacted(text[inner_start:inner_end]):
            spans.append((inner_start, inner_end))
        resume = outer
    return spans


def _shape_spans(text: str) -> list[tuple[int, int]]:
    """The values of name/value shapes that name a secret: a name-field and a value-field next to each other."""
    spans: list[tuple[int, int]] = []
    previous: tuple[str, int, int, int] | None = None  # (name or value, inner start, inner end, outer end)
    for match in _PAIR.finditer(text):
        if previous is not None and match.start() < previous[3]:
            continue  # inside the value just read (``'value': 'x:y'`` holds no name of its own)
        name = match.group("qkey") if match.group("q") else match.group("key").lstrip("$@")
        flat = _flat(name)
        role = "name" if flat in _NAME_FIELDS else "value" if flat in _VALUE_FIELDS else None
        span = _value_span(text, match.end(), _separator(match), scalar_only=True) if role else None
        if role is None or span is None:
            previous = None
            continue
        current = (role, span[1], span[2], span[0])
        if previous is not None and previous[0] != role and not text[previous[3]:match.start()].strip(" \t\r\n,;"):
            named, valued = (previous, current) if role == "value" else (current, previous)
            if is_secret_name(text[named[1]:named[2]]) and not _already_redacted(text[valued[1]:valued[2]]):
                spans.append((valued[1], valued[2]))
            previous = None
            continue
        previous = current
    return spans


def _pem_blocks(text: str) -> tuple[str, int]:
    """Replace each PEM private key block, to its END line, or to the end of its body if it has none."""
    out, position, count, ends = [], 0, 0, True
    for begin in _PEM_BEGIN.finditer(text):
        if begin.start() < position:
            continue
        end = _PEM_END.search(text, begin.end()) if ends else None
        if end is None:
            ends = False  # no END after this BEGIN, so none after a later one: do not search again
            stop = _PEM_BODY.match(text, begin.end())
            finish = stop.end() if stop is not None else begin.end()
        else:
            finish = end.end()
        out += [text[position:begin.start()], marker("private-key")]
        position, count = finish, count + 1
    return "".join(out) + text[position:], count


def redact_text(text: str, field: str = "") -> tuple[str, Counter[str]]:
    """``text`` with every sensitive value replaced, and how many of each kind.

    ``field`` is the path of the field the text sits in; it decides only whether a dotted
    quad is a version number (see the module's decisions).

    A diagnostic repeats its short strings (key names, states, node names) in every read, and
    the summary repeats the diagnostic's: the answer for a short string is remembered, keyed by
    the text and the one thing ``field`` decides, so it is the same answer, computed once. Long
    strings (log lines, free text) are rarely repeated and are not kept.
    """
    redacted, found = _redacted_text(text, _is_version_field(field))
    return redacted, Counter(dict(found))


def _redacted_text(text: str, version: bool) -> tuple[str, tuple[tuple[str, int], ...]]:
    """:func:`redact_text`'s work, its counts as (kind, count) pairs: a document's walk reads them
    and makes no Counter for each of its strings, nearly all of which hold nothing to count."""
    if not text:
        return text, ()
    if len(text) <= MEMO_MAX_CHARS:
        return _redact_short(text, version)
    redacted, counts = _redact_text(text, version)
    return redacted, tuple(counts.items())


@lru_cache(maxsize=8192)
def _redact_short(text: str, version: bool) -> tuple[str, tuple[tuple[str, int], ...]]:
    redacted, counts = _redact_text(text, version)
    return redacted, tuple(counts.items())  # immutable: a cached answer must not be changed by a caller


def _redact_text(text: str, version: bool) -> tuple[str, Counter[str]]:
    counts: Counter[str] = Counter()
    if not _TRIGGER.search(text):
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
        if not value or _MARKER.search(value):
            return None  # redacted already (``Bearer [redacted:token]``)
        counts["token"] += 1
        return f"{m.group(1)}{m.group(2)}{marker('token')}"

    def scheme(m: re.Match) -> str | None:
        # "Basic instructions" is prose, "Basic bW9uaXRvcg==" a credential: base64 and
        # bearer tokens carry a digit or one of + / = _ almost always; prose words do not.
        if not _CREDENTIAL_CHARS.search(m.group(3)):
            return None
        counts["token"] += 1
        return f"{m.group(1)}{m.group(2)}{marker('token')}"

    def jwt(m: re.Match) -> str:
        counts["token"] += 1
        return marker("token")

    def random_token(m: re.Match) -> str | None:
        if not looks_random(m.group(0)):
            return None
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

    # Order matters: a private key block first (its body would otherwise read as tokens);
    # credentials inside a URI before the e-mail shape they contain (``user:pw@host.example.com``);
    # headers before the bearer token inside them; secret names before the shapes their values
    # may have; IPv6 before IPv4, since an IPv6 address may end in a dotted quad (``::ffff:10.0.0.5``).
    text, found = _pem_blocks(text)
    if found:
        counts["private-key"] += found
    text = sub(_URI_USERINFO, userinfo, text)
    text = sub(_HEADER_LINE, header, text)
    text = sub(_SCHEME_TOKEN, scheme, text)
    text, found = _pairs(text)
    if found:
        counts["secret"] += found
    text = sub(_JWT, jwt, text)
    text = sub(_TOKEN_RUN, random_token, text)
    text = sub(_EMAIL, email, text)
    text = sub(_IPV6_CANDIDATE, ipv6, text)
    if not version:
        text = sub(_IPV4, ipv4, text)
    return text, counts


def redact_line(text: str, limit: int) -> str:
    """``text`` redacted, on one line, cut to ``limit`` characters: a detail or message to store.

    Redacted *before* it is cut: a secret cut in half may no longer be recognisable.
    """
    return " ".join(redact_text(text)[0].split())[:limit]


def redact_field_path(path: str) -> str:
    """A recorded field path as today's rule writes it: cut after a secret name, and redacted.

    For paths written before nothing below a secret name was recorded
    (:func:`labkit.evidence.redact_fields_txn`).
    """
    parts = path.split(".")
    for index, part in enumerate(parts):
        if is_secret_name(part):
            parts = parts[: index + 1]
            break
    return redact_text(".".join(parts))[0][:MAX_FIELD_CHARS]


# --------------------------------------------------------------------------- documents


class _Record:
    """Counts per (field, kind), bounded: past MAX_RECORDED_FIELDS entries, per kind only."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], int] = {}

    def add(self, field: str, counts: Iterable[tuple[str, int]]) -> None:
        """Add (kind, count) pairs found in ``field``."""
        shown = field if len(field) <= MAX_FIELD_CHARS else field[: MAX_FIELD_CHARS - 3] + "..."
        for kind, count in counts:
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
    the record. A value under a secret name is replaced whole by one marker, whatever it is
    (a string, a number, an object or a list, with every key in it); None, true, false and
    the empty string are left: they hide nothing.
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
        record.add("(text)", counts.items())
        return Redacted(redacted, record.redactions())
    walked = redact(parsed)
    return Redacted(canonical_json(walked.value), walked.redactions)


def _join(field: str, part: str) -> str:
    return f"{field}.{part}" if field else part


def _walk(value: Any, field: str, record: _Record, *, secret: bool) -> Any:
    if secret:
        if value is None or isinstance(value, bool) or value == "" or (isinstance(value, str) and _MARKER.fullmatch(value)):
            return value  # nothing to hide, or redacted already
        if not isinstance(value, (str, int, float, list, dict)):
            raise TypeError(f"not a JSON value: {type(value).__name__}")
        record.add(field, (("secret", 1),))
        return marker("secret")
    if isinstance(value, str):
        redacted, found = _redacted_text(value, _is_version_field(field))
        if found:
            record.add(field, found)
        return redacted
    if value is None or isinstance(value, (int, float)):  # bool is an int
        return value
    if isinstance(value, list):
        return [_walk(item, _join(field, str(index)), record, secret=False) for index, item in enumerate(value)]
    if isinstance(value, dict):
        shape = _names_a_secret(value)
        out: dict[str, Any] = {}
        for key, item in value.items():
            name, found = _redacted_text(key, False)  # a key's path ends "(key)": never a version field
            if found:
                record.add(_join(field, "(key)"), found)
                name = _unique(name, out)
            held = is_secret_name(key) or (shape and _flat(key) in _VALUE_FIELDS)
            out[name] = _walk(item, _join(field, name), record, secret=held)
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
