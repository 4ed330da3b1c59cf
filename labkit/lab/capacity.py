"""The capacity model, a simulated year to check it against, and where embedded SQLite stops.

The lab's source sizes a trial workload at a hundred incidents a day, three checkpoints an
incident and evidence of about two kilobytes. This module turns such figures into rows and
bytes (:func:`predict`), fills a real labkit database with a year of simulated days to
measure the same thing (:func:`simulate`), and measures what a single SQLite file cannot do
however small the rows are: let two writers commit at once (:func:`writer_contention`).

**What the model counts.** The bytes of the database file after a checkpoint: every page of
every table and index b-tree (leaf, interior and overflow pages) and the schema. Not the
write-ahead log (up to ``wal_autocheckpoint`` pages, 4 MB by default, until it is merged
back), and not free pages (reused by the next inserts, or returned by ``VACUUM``).

**How.** Rows are not bytes. SQLite stores each row as a *record* (a header of type codes,
then the values) inside a *cell* on a 4096-byte page; a page holds as many whole cells as
fit, and a row too large for one page spills into overflow pages. labkit appends every row
at the end of its b-tree (rowids grow, incident ids are written in order), so each page is
filled until the next row no longer fits: with evidence rows of about 1.4 KB, two or three
fit and the rest of the page is empty. The model packs rows into pages that way, with the
record sizes labkit really writes (:func:`labkit_profile`, measured from real runs of the
shipped incidents, once), and adds each index and the interior pages. A naive estimate,
rows times their bytes, is reported beside it (``Prediction.naive_bytes``) to show what the
page arithmetic adds.

**The simulated year** writes, day by day, what the coordinator writes for each incident:
the first day through the same store helpers (:func:`labkit.store.create_run_txn`,
:func:`labkit.evidence.store_bounded_txn`, :func:`labkit.store.advance_txn`,
:func:`labkit.receipts.issue_receipt_txn`), the others as the same rows in one
``executemany`` a table, checked column by column against the first day's (see
:func:`simulate`), with a pinned clock one simulated day apart, one transaction a day and
``synchronous=OFF`` (durability is not what is measured, and the page layout does not
depend on it). Each incident repeats one of the shipped incidents under a
new id; its redaction is computed once per shipped incident.

Taught in 11_capacity_and_retention.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cache
from pathlib import Path

from ..assessments import Assessment, latest_assessment_txn
from ..children import this_labkit
from ..clock import TickingClock, parse_instant
from ..contract import CONTRACT, check_evidence
from ..coordinator import WORKFLOW_VERSION, Coordinator
from ..database import check_path, open_database, read_transaction, set_wal, transaction
from ..errors import BadInput, shown
from ..evidence import BoundedEvidence, bound_evidence, location_for, record_redactions_txn, store_bounded_txn
from ..jsontext import canonical_json, sha256_hex
from ..provider import ReferenceProvider, list_incidents
from ..receipts import issue_receipt_txn, receipt_id_for
from ..report import build_report
from ..retention import KEPT, database_bytes, diagnostic_of, retain_txn
from ..rules import REFERENCE_PROVIDER
from ..steps import Step
from ..store import TABLES, Evidence, advance_txn, connect, connect_readonly, create_run_txn, store_evidence_txn

#: The seed's trial workload.
SEED_INCIDENTS_PER_DAY = 100
SEED_CHECKPOINTS_PER_INCIDENT = 3
SEED_EVIDENCE_BYTES = 2048

PAGE_SIZE = 4096
#: Where the simulated year starts (a pinned clock, not the wall clock).
SIMULATION_START = "2026-01-01T00:00:00Z"
#: Simulated incident ids are "D" + day + "-" + number: three digits each.
MAX_DAYS = 999
MAX_INCIDENTS_PER_DAY = 999


class BadWorkload(BadInput):
    """A workload figure that is not a number in its range."""

    def __init__(self, name: str, value: object, expected: str):
        self.name, self.value, self.expected = name, value, expected
        super().__init__(f"{name}={shown(value)} is not {expected}")


def _whole(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadWorkload(name, value, f"a whole number from {low} to {high}")
    return value


def _number(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:  # also refuses NaN
        raise BadWorkload(name, value, f"a number from {low:g} to {high:g}")
    return float(value)


# --------------------------------------------------------------------------- SQLite's file format
#
# https://www.sqlite.org/fileformat2.html: "Record Format" and "B-tree Pages". Only what the
# model needs: the size of a record, of the cell that holds it, and how cells fill pages.


def varint_bytes(value: int) -> int:
    """Bytes SQLite's variable-length integer takes for ``value`` (1 to 9)."""
    if value < 0:
        return 9
    size = 1
    while value >= 0x80 and size < 9:
        value >>= 7
        size += 1
    return size


def _value_bytes(value: object) -> tuple[int, int]:
    """(serial type, content bytes) of one value in a record."""
    if value is None:
        return 0, 0
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        if value in (0, 1):
            return 8 + value, 0  # schema format 4 stores 0 and 1 in the type code alone
        for serial, size, bound in ((1, 1, 1 << 7), (2, 2, 1 << 15), (3, 3, 1 << 23), (4, 4, 1 << 31), (5, 6, 1 << 47)):
            if -bound <= value < bound:
                return serial, size
        return 6, 8
    if isinstance(value, float):
        # Eight bytes. (A column of REAL affinity may store a whole number as an integer;
        # labkit's per-incident rows hold no REAL.)
        return 7, 8
    if isinstance(value, bytes):
        return 12 + 2 * len(value), len(value)
    size = len(str(value).encode("utf-8"))
    return 13 + 2 * size, size


def record_bytes(values: Sequence[object]) -> int:
    """The size of a record holding ``values``: its header (type codes) and its content."""
    types = [_value_bytes(value) for value in values]
    header = sum(varint_bytes(serial) for serial, _ in types)
    header += varint_bytes(header + 1)
    return header + sum(size for _, size in types)


def _overflow(payload: int, max_local: int, page_size: int) -> tuple[int, int]:
    """(bytes kept on the b-tree page, overflow pages) for a payload: SQLite's spill rule."""
    if payload <= max_local:
        return payload, 0
    usable = page_size
    min_local = (usable - 12) * 32 // 255 - 23
    local = min_local + (payload - min_local) % (usable - 4)
    if local > max_local:
        local = min_local
    return local + 4, math.ceil((payload - local) / (usable - 4))


@dataclass(frozen=True)
class _Packing:
    """How one b-tree's cells fill pages: cells per leaf page, overflow pages per cell."""

    cells_per_leaf: float
    overflow_per_cell: float
    interior_fanout: int


def _pack(payloads: Sequence[int], *, index: bool, page_size: int = PAGE_SIZE, rowid: int = 100_000) -> _Packing:
    """Append cells of these payload sizes to a b-tree, each page filled until the next does not fit.

    That is what SQLite does when every insert goes at the end of the tree (its
    ``balance_quick``). ``rowid`` sets the width of the rowid in a table cell (three bytes
    for rowids from 16384 to two million, a year of labkit rows).
    """
    usable = page_size
    if index:
        max_local = (usable - 12) * 64 // 255 - 23
    else:
        max_local = usable - 35
    capacity = usable - 8  # a leaf page's header
    pages, used, overflow = 1, 0, 0
    for payload in payloads:
        local, spilled = _overflow(payload, max_local, page_size)
        cell = varint_bytes(payload) + local + (0 if index else varint_bytes(rowid)) + 2  # + the cell pointer
        overflow += spilled
        if used + cell > capacity:
            pages, used = pages + 1, 0
        used += cell
    # The last page is only partly full; count the pages the cells filled, to the fraction.
    filled = pages - 1 + used / capacity
    mean = statistics.fmean(payloads) if payloads else 0.0
    interior_cell = (4 + varint_bytes(int(mean)) + min(int(mean), max_local) + 2) if index else (4 + varint_bytes(rowid) + 2)
    return _Packing(len(payloads) / filled if filled else 1.0, overflow / max(len(payloads), 1), max(2, (usable - 12) // interior_cell))


def _tree_pages(rows: float, packing: _Packing) -> int:
    """Pages of a b-tree holding ``rows`` cells: leaves, interior levels, overflow."""
    if rows <= 0:
        return 1  # an empty table or index still has its root page
    leaves = math.ceil(rows / packing.cells_per_leaf)
    pages, level = leaves, leaves
    while level > 1:
        level = math.ceil(level / packing.interior_fanout)
        pages += level
    return pages + math.ceil(rows * packing.overflow_per_cell)


# --------------------------------------------------------------------------- what labkit writes


@dataclass(frozen=True)
class Profile:
    """The records labkit writes for one incident, table by table, measured from real rows.

    ``tables`` maps each table to one list per incident of its rows' record sizes (in the
    order they were written); ``indexes`` maps each index to its table and the same for
    its keys. ``summary_bytes`` and ``raw_bytes`` are each incident's evidence body and raw
    diagnostic, as stored.
    """

    incidents: tuple[str, ...]
    tables: dict[str, list[list[int]]]
    indexes: dict[str, tuple[str, list[list[int]]]]
    summary_bytes: list[int]
    raw_bytes: list[int]
    empty_pages: int

    @property
    def mean_summary_bytes(self) -> float:
        return statistics.fmean(self.summary_bytes)

    @property
    def mean_raw_bytes(self) -> float:
        return statistics.fmean(self.raw_bytes)

    def record_bytes_per_incident(self) -> dict[str, float]:
        """Mean bytes of records per incident, per table: the naive estimate's figures."""
        return {table: statistics.fmean(sum(rows) for rows in per) for table, per in self.tables.items()}


#: Tables whose rows are not per incident (one row per migration or retention run).
_NOT_PER_INCIDENT = ("migrations", "retentions")


def profile_of(db: str | Path) -> Profile:
    """What labkit wrote for each incident of an existing database, as SQLite record sizes."""

    with closing(connect_readonly(db)) as conn, read_transaction(conn):
        incidents = [row[0] for row in conn.execute("SELECT incident FROM runs ORDER BY rowid")]
        tables: dict[str, list[list[int]]] = {}
        indexes: dict[str, tuple[str, list[list[int]]]] = {}
        for table in TABLES:
            if table in _NOT_PER_INCIDENT:
                continue
            columns = [(row["name"], row["pk"], row["type"]) for row in conn.execute(f"PRAGMA table_info({table})")]
            keys = [name for name, pk, _ in columns if pk]
            alias = keys[0] if len(keys) == 1 and [t for n, pk, t in columns if pk][0].upper() == "INTEGER" else None
            names = [name for name, _, _ in columns]
            if "incident" not in names:
                continue  # not a per-incident table: the model has no use for it
            per: dict[str, list[int]] = {incident: [] for incident in incidents}
            rows = conn.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
            for row in rows:
                # An INTEGER PRIMARY KEY is the rowid: the record holds NULL in its place.
                values = [None if name == alias else row[name] for name in names]
                per.setdefault(row["incident"], []).append(record_bytes(values))
            tables[table] = [per[incident] for incident in incidents]
            for index in conn.execute(f"PRAGMA index_list({table})").fetchall():
                key_columns = [info["name"] for info in conn.execute(f"PRAGMA index_info({index['name']})")]
                keyed: dict[str, list[int]] = {incident: [] for incident in incidents}
                for row in rows:
                    keyed.setdefault(row["incident"], []).append(record_bytes([row[c] for c in key_columns] + [row["rowid"]]))
                indexes[index["name"]] = (table, [keyed[incident] for incident in incidents])
        summaries = dict(conn.execute("SELECT incident, length(CAST(body AS BLOB)) FROM evidence").fetchall())
        raws = dict(conn.execute("SELECT incident, bytes FROM diagnostics").fetchall())
    return Profile(tuple(incidents), tables, indexes, [summaries.get(i, 0) for i in incidents], [raws.get(i, 0) for i in incidents],
                   empty_database_pages())


@cache
def empty_database_pages() -> int:
    """Pages of a labkit database with no rows: the schema, and one root page per table and index."""

    with tempfile.TemporaryDirectory(prefix="labkit-empty-") as folder, closing(connect(Path(folder) / "empty.db")) as conn:
        return conn.execute("PRAGMA page_count").fetchone()[0]


@cache
def labkit_profile() -> Profile:
    """:func:`profile_of` a database where each shipped incident ran once through the coordinator.

    Made once per process, in a temporary folder, with the reference provider and a pinned
    clock: what labkit writes for one incident, today, whatever columns the schema has.
    """

    with tempfile.TemporaryDirectory(prefix="labkit-profile-") as folder:
        db = Path(folder) / "profile.db"
        with closing(connect(db)) as conn:
            coordinator = Coordinator(conn, ReferenceProvider(Path(folder) / "calls.jsonl"), clock=TickingClock(SIMULATION_START))
            for incident in list_incidents():
                coordinator.drive(incident)
        return profile_of(db)


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Prediction:
    """Rows and bytes a workload leaves in the database file (see the module: what is counted).

    ``bytes_by_table`` includes each table's indexes; ``naive_bytes`` is rows times record
    bytes, without pages, cells, indexes or overflow.
    """

    days: int
    incidents: int
    rows: dict[str, int]
    bytes_by_table: dict[str, int]
    pages: int
    bytes: int
    naive_bytes: int
    summary_bytes: float
    raw_bytes: float
    raw_inline: bool
    retention_days: float | None

    def table(self) -> list[dict[str, object]]:
        """One row per table: its rows and the bytes of its pages (indexes included), largest first."""
        return [{"table": table, "rows": self.rows.get(table, 0), "MB": round(size / 1e6, 2)}
                for table, size in sorted(self.bytes_by_table.items(), key=lambda item: -item[1]) if size > PAGE_SIZE]


def _shifted(sizes: list[list[int]], shift: float) -> list[list[int]]:
    return [[max(1, round(size + shift)) for size in rows] for rows in sizes]


@dataclass(frozen=True)
class _Model:
    """One workload's shape: rows an incident and how each b-tree packs them; scaled by counts."""

    rows_per_incident: dict[str, float]
    record_bytes_per_row: dict[str, float]
    table_packing: dict[str, _Packing]
    index_packing: dict[str, tuple[str, _Packing]]
    empty_pages: int
    summary_bytes: float
    raw_bytes: float
    raw_inline: bool
    page_size: int


#: The evidence row of a design without references carries the raw diagnostic under this key.
INLINE_KEY = "raw_diagnostic"


def _model(profile: Profile, checkpoints: int, summary_bytes: float | None, raw_bytes: float | None, raw_inline: bool,
           page_size: int) -> _Model:
    summary_shift = 0.0 if summary_bytes is None else summary_bytes - profile.mean_summary_bytes
    raw_shift = 0.0 if raw_bytes is None else raw_bytes - profile.mean_raw_bytes
    tables = dict(profile.tables)
    tables["evidence"] = _shifted(tables["evidence"], summary_shift)
    raws = [max(1, round(raw + raw_shift)) for raw in profile.raw_bytes]
    if raw_inline:
        # The raw diagnostic inside the evidence body (`,"raw_diagnostic":` and the JSON), and
        # no reference (digest and location) and no row or index of its own.
        extra = len(f',"{INLINE_KEY}":')
        tables["evidence"] = [[size + raw + extra - 64 - len(location_for(incident)) for size in rows]
                              for rows, raw, incident in zip(tables["evidence"], raws, profile.incidents, strict=True)]
        tables.pop("diagnostics", None)
    else:
        tables["diagnostics"] = _shifted(tables["diagnostics"], raw_shift)
    rows_per: dict[str, float] = {}
    record_per: dict[str, float] = {}
    packing: dict[str, _Packing] = {}
    for table, per in tables.items():
        flat = [size for rows in per for size in rows]
        rows_per[table] = checkpoints if table == "transitions" else len(flat) / len(per)
        record_per[table] = statistics.fmean(flat) if flat else 0.0
        # Pack a long stretch of rows in the order they are written, so that the mix of
        # sizes, not only their mean, decides how many fit a page.
        packing[table] = _pack(flat * max(1, 4000 // len(flat)), index=False, page_size=page_size) if flat else _Packing(1, 0, 2)
    indexes = {}
    for name, (table, per) in profile.indexes.items():
        flat = [size for rows in per for size in rows]
        if table in tables and flat:
            indexes[name] = (table, _pack(flat * max(1, 4000 // len(flat)), index=True, page_size=page_size))
    return _Model(rows_per, record_per, packing, indexes, profile.empty_pages, profile.mean_summary_bytes + summary_shift,
                  statistics.fmean(raws), raw_inline, page_size)


#: A row of ``retentions``: about 60 bytes, so a page holds some sixty.
_RETENTIONS_PACKING = _Packing(60, 0, 400)


def _evaluate(model: _Model, incidents_per_day: int, days: int, retention_days: float | None) -> Prediction:
    incidents = incidents_per_day * days
    rows = {table: round(per * incidents) for table, per in model.rows_per_incident.items()}
    if "diagnostics" in rows and retention_days is not None:
        # Retention runs at the start of each day: R days of raw diagnostics, plus today's.
        rows["diagnostics"] = round(model.rows_per_incident["diagnostics"] * incidents_per_day * min(days, math.floor(retention_days) + 1))
    pages_by_table = {table: _tree_pages(rows[table], packing) for table, packing in model.table_packing.items()}
    for table, packing in model.index_packing.values():
        pages_by_table[table] += _tree_pages(rows[table], packing)
    if "diagnostics" in rows and retention_days is not None:
        rows["retentions"] = days
        pages_by_table["retentions"] = _tree_pages(days, _RETENTIONS_PACKING)
    # The empty database already has one root page per table and index.
    roots = len(model.table_packing) + len(model.index_packing) + ("retentions" in pages_by_table)
    pages = model.empty_pages + sum(pages_by_table.values()) - roots
    naive = round(sum(rows[table] * model.record_bytes_per_row.get(table, 60.0) for table in rows))
    return Prediction(days, incidents, rows, {t: p * model.page_size for t, p in pages_by_table.items()}, pages,
                      pages * model.page_size, naive, model.summary_bytes, model.raw_bytes, model.raw_inline, retention_days)


def _checked_model(checkpoints_per_incident: object, evidence_bytes: object, raw_bytes: object, raw_inline: bool,
                   profile: Profile | None, page_size: int) -> _Model:
    checkpoints = _whole("checkpoints_per_incident", checkpoints_per_incident, 1, 1000)
    summary = None if evidence_bytes is None else _number("evidence_bytes", evidence_bytes, 16, 1 << 30)
    raw = None if raw_bytes is None else _number("raw_bytes", raw_bytes, 16, 1 << 30)
    return _model(profile or labkit_profile(), checkpoints, summary, raw, bool(raw_inline), page_size)


def predict(
    incidents_per_day: int = SEED_INCIDENTS_PER_DAY,
    checkpoints_per_incident: int = SEED_CHECKPOINTS_PER_INCIDENT,
    evidence_bytes: float | None = None,
    retention_days: float | None = None,
    days: int = 365,
    *,
    raw_bytes: float | None = None,
    raw_inline: bool = False,
    profile: Profile | None = None,
    page_size: int = PAGE_SIZE,
) -> Prediction:
    """Predict the rows and bytes ``days`` days of a workload leave in a labkit database file.

    ``evidence_bytes`` is the mean size of an evidence summary (the seed says about 2048;
    None: what labkit's shipped incidents measure, about 1.1 KB); ``raw_bytes`` the mean
    raw diagnostic (None: the shipped snapshots', about 1.7 KB). ``retention_days`` is the
    age past which raw diagnostics are removed (None: kept for ever); with ``raw_inline`` the
    raw diagnostic sits in the evidence row instead, where retention cannot reach it. The
    other rows (run, assessment, receipt, redactions) are what labkit writes for the shipped
    incidents (``profile``, default :func:`labkit_profile`), varying as theirs do; the
    transitions are ``checkpoints_per_incident``.
    """
    incidents_per_day = _whole("incidents_per_day", incidents_per_day, 1, 1_000_000)
    days = _whole("days", days, 1, 100_000)
    retention = None if retention_days is None else _number("retention_days", retention_days, 0, 36_500)
    model = _checked_model(checkpoints_per_incident, evidence_bytes, raw_bytes, raw_inline, profile, page_size)
    return _evaluate(model, incidents_per_day, days, retention)


def predict_by_day(
    days: int,
    incidents_per_day: int = SEED_INCIDENTS_PER_DAY,
    checkpoints_per_incident: int = SEED_CHECKPOINTS_PER_INCIDENT,
    evidence_bytes: float | None = None,
    retention_days: float | None = None,
    *,
    raw_bytes: float | None = None,
    raw_inline: bool = False,
    profile: Profile | None = None,
    page_size: int = PAGE_SIZE,
) -> list[tuple[int, int]]:
    """(day, predicted bytes) at the end of each day 1 to ``days``: the curve beside a measured one."""
    days = _whole("days", days, 1, 100_000)
    incidents_per_day = _whole("incidents_per_day", incidents_per_day, 1, 1_000_000)
    retention = None if retention_days is None else _number("retention_days", retention_days, 0, 36_500)
    model = _checked_model(checkpoints_per_incident, evidence_bytes, raw_bytes, raw_inline, profile, page_size)
    return [(day, _evaluate(model, incidents_per_day, day, retention).bytes) for day in range(1, days + 1)]


# --------------------------------------------------------------------------- the simulated year


@dataclass(frozen=True)
class Simulation:
    """A database filled with simulated days, and what it measured.

    ``sizes`` holds (day, bytes) after each day: the database's pages times the page size, as
    :func:`labkit.retention.database_bytes` counts them. ``rows`` counts every lab table's rows
    at the end; ``free_pages`` is SQLite's free list then.
    """

    path: Path
    days: int
    incidents_per_day: int
    retention_days: float | None
    raw_inline: bool
    seconds: float
    sizes: list[tuple[int, int]]
    rows: dict[str, int]
    free_pages: int
    mean_summary_bytes: float
    mean_raw_bytes: float

    @property
    def bytes(self) -> int:
        return self.sizes[-1][1]

    @property
    def incidents(self) -> int:
        return self.days * self.incidents_per_day


@dataclass(frozen=True)
class _Template:
    incident: str
    bounded: BoundedEvidence
    raw_value: object  # the redacted raw diagnostic as JSON, for the inline layout


def _templates(folder: Path) -> list[_Template]:

    provider = ReferenceProvider(folder / "simulation-provider-calls.jsonl")
    templates = []
    for incident in list_incidents():
        reading = provider.read_with_diagnostic(incident)
        bounded = bound_evidence(incident, check_evidence(reading.response, incident), reading.diagnostic)
        templates.append(_Template(incident, bounded, json.loads(bounded.diagnostic)))
    return templates


def simulate(
    path: str | Path,
    *,
    days: int = 365,
    incidents_per_day: int = SEED_INCIDENTS_PER_DAY,
    retention_days: float | None = 30,
    raw_inline: bool = False,
    start: str = SIMULATION_START,
    on_day: Callable[[int], None] | None = None,
) -> Simulation:
    """Fill a new labkit database at ``path`` with ``days`` simulated days, and measure it.

    ``on_day`` is told how many days are done after each one (a lesson's progress bar).

    Each day, at its first second: a retention run (unless ``retention_days`` is None or
    ``raw_inline``), then ``incidents_per_day`` incidents, each written as the coordinator
    writes it: run, evidence with its reference, raw diagnostic and redactions, assessment,
    two transitions, receipt. One transaction a day. With ``raw_inline`` the evidence row
    carries the raw diagnostic itself (a design without references), so nothing is kept
    apart and nothing can be removed. ``path`` must not exist yet (its folder must).

    The first day goes through the store helpers, one incident at a time, as the coordinator
    calls them. Every later day is written by :func:`_incident_rows` and ``executemany``: the
    same rows, built by the same functions (canonical JSON, digests, receipt ids,
    :func:`labkit.report.build_report`) without the helpers' reads and checks: about three
    times as fast, to the same bytes. On the first day the rows the helpers wrote are
    compared with the rows :func:`_incident_rows` builds for the same incidents and clock
    readings, every column of every per-incident table; any difference stops the simulation
    (:class:`SimulationDrift`), so the fast days can never quietly write something labkit
    does not. A year at the seed's figures takes under two seconds; a smaller workload is
    proportionally faster.
    """

    days = _whole("days", days, 1, MAX_DAYS)
    incidents_per_day = _whole("incidents_per_day", incidents_per_day, 1, MAX_INCIDENTS_PER_DAY)
    retention = None if retention_days is None else _number("retention_days", retention_days, 0, 36_500)
    path = Path(path)
    check_path(path, must_exist=False)
    if path.exists():
        raise BadWorkload("path", str(path), "a path where no file exists yet (a simulation fills a new database)")
    first = parse_instant(start)
    inputs = {"provider": REFERENCE_PROVIDER, "rules_revision": 1, "prompt_revision": None}
    began = time.perf_counter()
    sizes: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory(prefix="labkit-simulation-") as scratch:
        templates = _templates(Path(scratch))
    shapes = {template.incident: _shape(template, raw_inline, inputs) for template in templates}
    with closing(connect(path)) as conn:
        # A simulation: if it dies, the file is thrown away. Durability does not change
        # which pages rows land on, and fsync per day, or every page written twice (to the
        # write-ahead log, then to the file), would only make it slower; the file goes back
        # to WAL at the end. A large page cache keeps the daily retention's scans in memory.
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA journal_mode = MEMORY")
        conn.execute("PRAGMA cache_size = -65536")
        number = 0

        def through_the_helpers(template: _Template, incident: str, clock: TickingClock) -> None:
            bounded = template.bounded
            body = dict(bounded.body, incident=incident)
            run = create_run_txn(conn, incident, WORKFLOW_VERSION, clock)
            if raw_inline:
                inline = dict(body, **{INLINE_KEY: template.raw_value})
                evidence = store_evidence_txn(conn, incident, CONTRACT, inline, clock, inputs)
                record_redactions_txn(conn, incident, bounded.redactions)
            else:
                text = bounded.diagnostic.replace(f'"incident":"{template.incident}"', f'"incident":"{incident}"', 1)
                renamed = replace(bounded, body=body, diagnostic=text, diagnostic_digest=sha256_hex(text))
                evidence = store_bounded_txn(conn, incident, CONTRACT, renamed, clock, inputs)
            run = advance_txn(conn, run, Step.EVIDENCE_RECORDED, clock)
            report = build_report(evidence, latest_assessment_txn(conn, incident))
            issue_receipt_txn(conn, incident, WORKFLOW_VERSION, report, clock)
            advance_txn(conn, run, Step.REPORT_COMPLETED, clock)

        for day in range(days):
            if on_day is not None and day:
                on_day(day)
            moment = first + timedelta(days=day)
            clock = TickingClock(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
            today = [(templates[(number + index) % len(templates)], f"D{day:03d}-{index:03d}") for index in range(incidents_per_day)]
            number += incidents_per_day
            with transaction(conn):
                if retention is not None and not raw_inline:
                    retain_txn(conn, retention, clock)
                readings = _readings(clock, _READINGS * len(today))
                built = [_incident_rows(shapes[template.incident], incident, readings[_READINGS * n:_READINGS * (n + 1)])
                         for n, (template, incident) in enumerate(today)]
                if day == 0:  # through the helpers, then held against what the fast path built for the same day
                    for template, incident in today:
                        through_the_helpers(template, incident, clock)
                    _check_same_rows(conn, built)
                else:
                    _insert_rows_txn(conn, built)
            sizes.append((day + 1, database_bytes(conn)))
        set_wal(conn)
        with read_transaction(conn):
            rows = {table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in TABLES}
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return Simulation(path, days, incidents_per_day, retention, raw_inline, time.perf_counter() - began, sizes, rows, free,
                      statistics.fmean(t.bounded.summary_bytes for t in templates),
                      statistics.fmean(t.bounded.diagnostic_bytes for t in templates))


class SimulationDrift(RuntimeError):
    """The simulation's fast days would no longer write what labkit's store helpers write."""


#: The columns :func:`_incident_rows` fills, table by table, in the order the helpers first write
#: to each table. A column left out is NULL or its default, as the helpers leave it.
_SIMULATED_COLUMNS = {
    "runs": ("incident", "workflow_version", "step", "version", "created_at", "updated_at"),
    "transitions": ("incident", "from_step", "to_step", "state_version", "at"),
    "evidence": ("incident", "contract", "body", "digest", "recorded_at", "provider", "rules_revision", "prompt_revision",
                 "diagnostic_digest", "diagnostic_location"),
    "assessments": ("incident", "seq", "origin", "kind", "summary", "signals", "provider", "rules_revision", "prompt_revision",
                    "contract", "reason", "changed", "at"),
    "diagnostics": ("incident", "digest", "body", "bytes", "kept_at"),
    "redactions": ("incident", "part", "field", "kind", "count"),
    "receipts": ("incident", "receipt_id", "evidence_digest", "report", "issued_at"),
}


@dataclass(frozen=True)
class _Shape:
    """What the helpers write for one shipped incident under its own id; a simulated incident copies it.

    Built once per shipped incident by the functions the helpers call (canonical JSON,
    sha256, :func:`labkit.report.build_report`); a copy changes only what depends on the
    incident id: the id, the digests of the texts that hold it, the receipt id, the times.
    """

    incident: str
    evidence_text: str
    evidence_digest: str
    report_text: str
    diagnostic_text: str | None
    evidence_columns: tuple[object, ...]  # contract, then provider, rules_revision, prompt_revision
    assessment_columns: tuple[object, ...]  # seq to changed, without the time
    redactions: tuple[tuple[str, str, str, int], ...]


def _shape(template: _Template, raw_inline: bool, inputs: dict[str, object]) -> _Shape:

    bounded = template.bounded
    body = dict(bounded.body, **({INLINE_KEY: template.raw_value} if raw_inline else {}))
    text = canonical_json(body)
    digest = sha256_hex(text)
    provider, rules, prompt = inputs.get("provider"), inputs.get("rules_revision"), inputs.get("prompt_revision")
    diagnosis = body["diagnosis"]
    signals = diagnosis.get("signals", [])
    assessment = Assessment(template.incident, 1, "inspection", str(diagnosis["kind"]), str(diagnosis["summary"]),
                            list(signals) if isinstance(signals, list) else [], str(provider or "unknown"),
                            rules if isinstance(rules, int) and not isinstance(rules, bool) else None,
                            prompt if isinstance(prompt, str) else None, CONTRACT, None, [], "")
    evidence = Evidence(
        template.incident, CONTRACT, body, digest, "",
        provider if isinstance(provider, str) else None,
        rules if isinstance(rules, int) and not isinstance(rules, bool) else None,
        prompt if isinstance(prompt, str) else None,
    )
    return _Shape(
        template.incident, text, digest, canonical_json(build_report(evidence, assessment)),
        None if raw_inline else bounded.diagnostic, (CONTRACT, provider, rules, prompt),
        (1, "inspection", assessment.kind, assessment.summary, canonical_json(assessment.signals), assessment.provider,
         assessment.rules_revision, assessment.prompt_revision, CONTRACT, None, canonical_json([])),
        tuple((part, r.field, r.kind, r.count) for part, r in bounded.redactions),
    )


def _incident_rows(shape: _Shape, incident: str, readings: Sequence[str]) -> dict[str, list[tuple[object, ...]]]:
    """The rows the coordinator's store helpers write for one incident, built without them.

    Column for column (:data:`_SIMULATED_COLUMNS`) what :func:`simulate`'s first day writes
    through :func:`labkit.store.create_run_txn`, :func:`labkit.evidence.store_bounded_txn`
    (or :func:`labkit.store.store_evidence_txn` with the raw diagnostic inline), two
    :func:`labkit.store.advance_txn` and :func:`labkit.receipts.issue_receipt_txn`, given the
    six readings of the clock the helpers take, in their order. The run is built at its last
    step rather than inserted and moved twice: the same row, and the same page it lands on.
    """
    created, recorded, assessed, inspected, issued, completed = readings
    # The incident id sits in each text once, as the value of its top-level "incident" key.
    old, new = f'"incident":"{shape.incident}"', f'"incident":"{incident}"'
    text = shape.evidence_text.replace(old, new, 1)
    digest = sha256_hex(text)
    contract, provider, rules, prompt = shape.evidence_columns
    reference: tuple[str | None, str | None] = (None, None)
    diagnostics: list[tuple[object, ...]] = []
    if shape.diagnostic_text is not None:
        raw = shape.diagnostic_text.replace(old, new, 1)
        reference = (sha256_hex(raw), location_for(incident))
        diagnostics = [(incident, reference[0], raw, len(raw.encode("utf-8")), recorded)]
    report = shape.report_text.replace(shape.evidence_digest, digest, 1).replace(old, new, 1)
    return {
        "runs": [(incident, WORKFLOW_VERSION, "report_completed", 2, created, completed)],
        "transitions": [(incident, None, "not_inspected", 0, created), (incident, "not_inspected", "evidence_recorded", 1, inspected),
                        (incident, "evidence_recorded", "report_completed", 2, completed)],
        "evidence": [(incident, contract, text, digest, recorded, provider, rules, prompt, *reference)],
        "assessments": [(incident, *shape.assessment_columns, assessed)],
        "diagnostics": diagnostics,
        "redactions": [(incident, *redaction) for redaction in shape.redactions],
        "receipts": [(incident, receipt_id_for(incident, WORKFLOW_VERSION), digest, report, issued)],
    }


#: Readings of the clock per simulated incident: run, evidence, assessment, two steps, receipt.
_READINGS = 6


def _readings(clock: TickingClock, count: int) -> list[str]:
    """The next ``count`` readings ``clock`` would give, without moving it; formatted once per second of the day.

    The same strings as ``clock.now()`` called ``count`` times (the first day's comparison
    checks it); about ten times cheaper than a ``strftime`` each.
    """
    first = parse_instant(copy.copy(clock).now())
    of_day = first.hour * 3600 + first.minute * 60 + first.second
    dates: dict[int, str] = {}
    out = []
    for tick in range(count):
        day, second = divmod(of_day + tick, 86_400)
        if day not in dates:
            dates[day] = (first + timedelta(days=day)).strftime("%Y-%m-%d")
        out.append(f"{dates[day]}T{_times_of_day()[second]}Z")
    return out


@cache
def _times_of_day() -> list[str]:
    """"00:00:00" to "23:59:59", made once."""
    return [f"{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}" for second in range(86_400)]


def _insert_rows_txn(conn: sqlite3.Connection, built: list[dict[str, list[tuple[object, ...]]]]) -> None:
    """Write what :func:`_incident_rows` built for a day's incidents: one ``executemany`` a table."""
    for table, columns in _SIMULATED_COLUMNS.items():
        rows = [row for incident in built for row in incident[table]]
        if rows:
            conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", rows)


def _check_same_rows(conn: sqlite3.Connection, expected: list[dict[str, list[tuple[object, ...]]]]) -> None:
    """Refuse to go on if the helpers wrote, for the first day, other rows than :func:`_incident_rows` builds."""

    incidents = [incident["runs"][0][0] for incident in expected]
    marks = ", ".join("?" * len(incidents))
    for table in TABLES:
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()
        names = [row["name"] for row in info]
        if "incident" not in names or table in _NOT_PER_INCIDENT:
            continue
        keys = [row for row in info if row["pk"]]
        # An INTEGER PRIMARY KEY is a counter (transitions.seq): its values are SQLite's, not the row's.
        columns = [n for n in names if not (len(keys) == 1 and keys[0]["name"] == n and keys[0]["type"].upper() == "INTEGER")]
        stored = [tuple(row) for row in conn.execute(
            f"SELECT {', '.join(columns)} FROM {table} WHERE incident IN ({marks}) ORDER BY rowid", incidents)]
        named = [dict(zip(_SIMULATED_COLUMNS.get(table, ()), row, strict=True)) for incident in expected for row in incident.get(table, [])]
        built = [tuple(row.get(c) for c in columns) for row in named]
        if stored != built:
            where = next((f"{mine[0]}, " + ", ".join(f"{column} written {shown(a, 60)}, built {shown(b, 60)}"
                                                     for column, a, b in zip(columns, theirs, mine, strict=True) if a != b)
                          for theirs, mine in zip(stored, built, strict=False) if theirs != mine),
                         f"{len(stored)} rows written, {len(built)} built")
            raise SimulationDrift(f"the simulation's fast path no longer writes what labkit's store helpers write, in {table}: "
                                  f"{where}; update labkit.lab.capacity._incident_rows")


@dataclass(frozen=True)
class Comparison:
    """A simulation beside the model's prediction for the same workload."""

    simulation: Simulation
    prediction: Prediction

    @property
    def error(self) -> float:
        """(predicted - measured) / measured: +0.05 means the model said 5 % more."""
        return (self.prediction.bytes - self.simulation.bytes) / self.simulation.bytes

    def as_row(self) -> dict[str, object]:
        """The comparison as one table row, in megabytes."""
        simulation = self.simulation
        layout = "raw inline" if simulation.raw_inline else (
            "kept apart, for ever" if simulation.retention_days is None else f"kept apart, {simulation.retention_days:g} days")
        return {
            "layout": layout, "days": simulation.days, "incidents": simulation.incidents,
            "naive MB (rows x bytes)": round(self.prediction.naive_bytes / 1e6, 1),
            "predicted MB": round(self.prediction.bytes / 1e6, 1), "measured MB": round(simulation.bytes / 1e6, 1),
            "error": f"{self.error:+.1%}", "seconds to simulate": round(simulation.seconds, 1),
        }


#: How close the model must come to the measured bytes (tests/lab/test_capacity.py holds it to this).
TOLERANCE = 0.05


def check_model(folder: str | Path, *, days: int = 365, incidents_per_day: int = SEED_INCIDENTS_PER_DAY,
                retention_days: float | None = 30, raw_inline: bool = False) -> Comparison:
    """Simulate a workload in ``folder`` and predict it: the lesson's check of the model against a file.

    The prediction uses what the simulated incidents really store (their summary and raw
    diagnostic sizes): the model is tested on its page arithmetic, not on a guess of sizes.
    """
    name = f"year-{days}d-{incidents_per_day}a-day-{'inline' if raw_inline else f'retain-{retention_days}'}.db"
    simulation = simulate(Path(folder) / name, days=days, incidents_per_day=incidents_per_day, retention_days=retention_days,
                          raw_inline=raw_inline)
    prediction = predict(incidents_per_day, SEED_CHECKPOINTS_PER_INCIDENT, None, retention_days, days, raw_inline=raw_inline)
    return Comparison(simulation, prediction)


def size_table(inline: Simulation, apart: Simulation, *, every: int = 7) -> list[dict[str, object]]:
    """Database size by day for two simulations of the same workload, measured and predicted, in MB.

    ``inline`` keeps raw diagnostics in the evidence row, ``apart`` keeps them by reference
    under retention. One row every ``every`` days, and the last day: the notebook's plot and
    its numbers as a table.
    """
    every = _whole("every", every, 1, MAX_DAYS)
    if not inline.raw_inline or apart.raw_inline or (inline.days, inline.incidents_per_day) != (apart.days, apart.incidents_per_day):
        raise BadWorkload("simulations", f"{inline.path.name}, {apart.path.name}",
                          "one simulation with raw diagnostics inline and one without, of the same days and incidents a day")
    days, per_day, retention = apart.days, apart.incidents_per_day, apart.retention_days
    predicted_inline = dict(predict_by_day(days, per_day, raw_inline=True))
    predicted_apart = dict(predict_by_day(days, per_day, retention_days=retention))
    measured_inline, measured_apart = dict(inline.sizes), dict(apart.sizes)
    kept = "for ever" if retention is None else f"{retention:g} days"
    mb = 1_000_000
    return [
        {
            "day": day,
            "raw inline, measured MB": round(measured_inline[day] / mb, 2),
            "raw inline, predicted MB": round(predicted_inline[day] / mb, 2),
            f"kept apart ({kept}), measured MB": round(measured_apart[day] / mb, 2),
            f"kept apart ({kept}), predicted MB": round(predicted_apart[day] / mb, 2),
        }
        for day in sorted({*range(every, days + 1, every), days})
    ]


def size_by_day(folder: str | Path, *, days: int = 365, incidents_per_day: int = SEED_INCIDENTS_PER_DAY,
                retention_days: float = 30, every: int = 7) -> list[dict[str, object]]:
    """:func:`size_table` of two new simulations in ``folder``: raw diagnostics inline, and kept apart.

    A year at the seed's figures simulates 73 000 incidents: some ten seconds on a laptop.
    A lesson that has already simulated one layout passes both to :func:`size_table` instead.
    """
    inline = simulate(Path(folder) / f"inline-{days}d-{incidents_per_day}a-day.db", days=days, incidents_per_day=incidents_per_day,
                      raw_inline=True)
    apart = simulate(Path(folder) / f"apart-{days}d-{incidents_per_day}a-day-{retention_days:g}.db", days=days,
                     incidents_per_day=incidents_per_day, retention_days=retention_days)
    return size_table(inline, apart, every=every)


# --------------------------------------------------------------------------- where embedded SQLite stops


@dataclass(frozen=True)
class ContentionRow:
    """One measured line: ``writers`` processes committing into one SQLite file at the same time."""

    writers: int
    hold_ms: float
    commits: int
    seconds: float
    commits_per_second: float
    wait_ms_median: float
    wait_ms_p95: float
    wait_ms_max: float
    busy_failures: int

    def as_row(self) -> dict[str, object]:
        return {
            "writers": self.writers, "lock held (ms)": self.hold_ms, "commits": self.commits,
            "commits/s": round(self.commits_per_second), "wait for the lock, median (ms)": round(self.wait_ms_median, 1),
            "p95 (ms)": round(self.wait_ms_p95, 1), "longest (ms)": round(self.wait_ms_max, 1), "gave up": self.busy_failures,
        }


_WRITER = """
import json, sys
from labkit.lab.capacity import _writer_child
print(json.dumps(_writer_child(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))), flush=True)
"""


def _writer_child(path: str, commits: int, hold_ms: float) -> dict[str, object]:  # pragma: no cover - runs in a child
    """One writer process: ``commits`` transactions, each holding the write lock ``hold_ms``.

    It says ``ready`` once connected and waits for a line on stdin, so that every writer
    starts together (a process takes longer to start than forty commits take to run).
    """

    conn = open_database(Path(path))
    conn.execute("PRAGMA synchronous = FULL")
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.time()
    waits, failures = [], 0
    for number in range(commits):
        asked = time.perf_counter()
        try:
            with transaction(conn):  # BEGIN IMMEDIATE: the wait for the write lock is the wait to get in here
                waits.append((time.perf_counter() - asked) * 1000)
                conn.execute("INSERT INTO commits (writer, number, at) VALUES (?, ?, ?)", (os.getpid(), number, time.time()))
                if hold_ms:
                    time.sleep(hold_ms / 1000)  # work done under the lock: a provider call inside the transaction
        except sqlite3.OperationalError:  # the busy timeout ran out
            failures += 1
    finished = time.time()
    conn.close()
    return {"waits": waits, "failures": failures, "started": started, "finished": finished}


def writer_contention(folder: str | Path, writers: Iterable[int] = (1, 2, 4, 8), *, commits: int = 20,
                      hold_ms: float = 10.0) -> list[ContentionRow]:
    """Measure N writer processes committing into one file at once, for each N in ``writers``.

    Each writer makes ``commits`` small transactions with labkit's settings (WAL,
    ``synchronous=FULL``, ``BEGIN IMMEDIATE``), holding the lock ``hold_ms`` each time (by
    default 10 ms: a short provider call inside the transaction, as the reference flow makes;
    the ceiling is then plain, 100 commits a second whatever the number of writers, where with
    no hold the figures mostly measure process scheduling); all start together. The default
    takes a few seconds. SQLite has one write lock per file: however many processes write,
    commits happen one at a time, so commits per second stay flat (or fall, as processes
    compete for the cores). The lock has no queue either: a writer that finds it taken
    sleeps and tries again, and meanwhile the writer that just committed usually takes it
    back, so the median wait stays near zero while the longest waits grow with the number
    of writers (the busy timeout, 10 s, is what a writer waits at most before it fails). The
    lock and the write-ahead log's shared memory also work only between processes of one
    host (no network file system). That is where an embedded database stops, and a
    database server or a workflow service starts.
    """
    folder = Path(folder)
    commits = _whole("commits", commits, 1, 100_000)
    hold = _number("hold_ms", hold_ms, 0, 10_000)
    counts = [_whole("writers", count, 1, 64) for count in writers]
    env = this_labkit()
    rows = []
    for count in counts:
        path = folder / f"contention-{count}-writers-{hold:g}ms.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        with closing(open_database(path)) as conn:
            set_wal(conn)
            conn.execute("CREATE TABLE commits (writer INTEGER NOT NULL, number INTEGER NOT NULL, at REAL NOT NULL) STRICT")
        children = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(commits), str(hold)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(count)]
        try:
            for child in children:
                assert child.stdout is not None
                if child.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"a writer process failed to start: {child.communicate(timeout=60)[1].strip()[-200:]}")
            for child in children:
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            results = []
            for child in children:
                out, err = child.communicate(timeout=600)
                if child.returncode != 0:
                    raise RuntimeError(f"a writer process failed: {err.strip()[-200:] or child.returncode}")
                results.append(json.loads(out))
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        waits = sorted(w for r in results for w in r["waits"])
        done = sum(len(r["waits"]) for r in results)
        seconds = max(r["finished"] for r in results) - min(r["started"] for r in results)
        rows.append(ContentionRow(count, hold, done, seconds, done / seconds if seconds > 0 else math.inf,
                                  statistics.median(waits) if waits else 0.0,
                                  waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else 0.0,
                                  waits[-1] if waits else 0.0, sum(r["failures"] for r in results)))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return rows


def seed_figures() -> dict[str, object]:
    """The source's trial workload, and labkit's own per-incident figures beside it (from :func:`labkit_profile`)."""
    profile = labkit_profile()
    return {
        "incidents a day": SEED_INCIDENTS_PER_DAY,
        "checkpoints an incident": SEED_CHECKPOINTS_PER_INCIDENT,
        "evidence bytes (seed)": SEED_EVIDENCE_BYTES,
        "evidence summary bytes (labkit, mean)": round(profile.mean_summary_bytes),
        "raw diagnostic bytes (labkit, mean)": round(profile.mean_raw_bytes),
        "record bytes an incident, by table (labkit)": {t: round(b) for t, b in profile.record_bytes_per_incident().items() if b},
    }


__all__ = [
    "PAGE_SIZE", "SEED_CHECKPOINTS_PER_INCIDENT", "SEED_EVIDENCE_BYTES", "SEED_INCIDENTS_PER_DAY", "TOLERANCE",
    "BadWorkload", "Comparison", "ContentionRow", "Prediction", "Profile", "Simulation", "SimulationDrift",
    "check_model", "empty_database_pages", "labkit_profile", "predict", "predict_by_day", "profile_of", "record_bytes",
    "seed_figures", "simulate", "size_by_day", "size_table", "varint_bytes", "writer_contention",
]


# --------------------------------------------------------------------------- what retention leaves (lesson 11)


def beyond_the_summary(db: str | Path, incident: str) -> str:
    """What someone settling or investigating ``incident`` can still read beyond its evidence summary, in one line.

    The raw diagnostic's top-level fields that the summary does not hold, read through the
    reference and checked against its digest; or, once retention removed it, that only the
    summary is left.
    """
    found = diagnostic_of(db, incident)
    if found.state != KEPT or found.text is None:
        by = f" by retention {found.removed_by}" if found.removed_by is not None else ""
        return f"{found.state}{by}: only the summary is left"
    with closing(connect_readonly(db)) as conn:
        summary = json.loads(conn.execute("SELECT body FROM evidence WHERE incident = ?", (incident,)).fetchone()[0])
    only_raw = sorted(set(json.loads(found.text)) - set(summary))
    return f"the raw diagnostic, digest checked: {', '.join(only_raw)}"


def a_marker_of(db: str | Path, incident: str, size: int = 40) -> bytes:
    """``size`` bytes of ``incident``'s raw diagnostic that occur once in the database's files: what to search for."""
    text = diagnostic_of(db, incident).text
    if text is None:
        raise ValueError(f"{incident} has no raw diagnostic kept")
    files = b"".join(path.read_bytes() for path in database_files(db))
    for start in range(0, max(1, len(text) - size)):
        piece = text[start:start + size].encode("utf-8")
        if files.count(piece) == 1:
            return piece
    raise ValueError(f"no piece of {incident}'s raw diagnostic is unique in the file")


def database_files(db: str | Path) -> list[Path]:
    """The database file and its write-ahead log and shared memory, those that exist."""
    path = Path(db)
    return [candidate for candidate in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
            if candidate.exists()]


def bytes_found(db: str | Path, marker: bytes) -> int:
    """How many times ``marker`` occurs in the raw bytes of the database's files (free pages and the log included)."""
    return sum(path.read_bytes().count(marker) for path in database_files(db))


def size_figure(table: Sequence[dict[str, object]]):
    """:func:`size_table` as a matplotlib line plot: measured (solid) and predicted (dashed), inline and kept apart."""
    import matplotlib.pyplot as plt  # an optional heavy dependency: loaded only when a picture is asked for

    days = [float(str(row["day"])) for row in table]
    figure, axes = plt.subplots(figsize=(8, 4.2))
    for column in [name for name in table[0] if name != "day"]:
        style = "--" if "predicted" in column else "-"
        colour = "#b91c1c" if column.startswith("raw inline") else "#1d4ed8"
        axes.plot(days, [float(str(row[column])) for row in table], style, color=colour, label=column.replace(" MB", ""))
    axes.set_xlabel("day")
    axes.set_ylabel("database size (MB)")
    axes.set_xlim(0, max(days))
    axes.set_ylim(0, None)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    axes.set_title("a year of 100 incidents a day: measured and predicted", fontsize=10)
    figure.tight_layout()
    return figure
