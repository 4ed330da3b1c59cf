"""The checkpoint database's schema: every table, and the ordered list of changes that builds it.

Kept in one module that imports nothing from labkit (as DBOS keeps ``_migration.py``), so the
store can apply it and every other module can read it without importing each other. Each
table's *rules* (who writes it, what a row means) live in the module named beside it.

Entry n of :data:`MIGRATIONS` moves a database from schema version n to n+1, in the same
transaction that bumps ``PRAGMA user_version`` (:func:`labkit.store.connect`). Never edit an
entry, not even its spacing: labkit recognises a database it made by the SQL text SQLite
stored from these statements (``sqlite_master``, :func:`labkit.store.expected_schema`), so an
edited statement would make every existing lab database look foreign. Append an entry instead.
Taught in 03_durable_checkpoint and 08_versioning.
"""

from __future__ import annotations

#: Written into the file header (``PRAGMA application_id``) so that labkit can tell its own
#: databases from any other program's: the four bytes spell "LABK".
APPLICATION_ID = int.from_bytes(b"LABK", "big")

#: A step's rank in SQL, for the triggers that hold the step order (the steps of labkit.steps).
STEP_RANK_SQL = "CASE {col} WHEN 'not_inspected' THEN 0 WHEN 'evidence_recorded' THEN 1 WHEN 'report_completed' THEN 2 END"

# --------------------------------------------------------------------------- schema version 1

#: Rules: labkit.store (create_run_txn, advance_txn: the compare-and-set); labkit.coordinator decides.
RUNS_TABLE_V1 = """CREATE TABLE runs (
            incident          TEXT PRIMARY KEY,
            workflow_version  INTEGER NOT NULL,
            step              TEXT NOT NULL CHECK (step IN ('not_inspected', 'evidence_recorded', 'report_completed')),
            version           INTEGER NOT NULL DEFAULT 0,  -- bumped by every transition: the compare-and-set token
            created_at        TEXT NOT NULL,
            updated_at        TEXT NOT NULL
        ) STRICT"""

#: Rules: labkit.store (store_evidence_txn, load_evidence_txn).
EVIDENCE_TABLE_V1 = """CREATE TABLE evidence (
            incident     TEXT PRIMARY KEY REFERENCES runs (incident),
            contract     TEXT NOT NULL,
            body         TEXT NOT NULL,   -- the validated provider response, canonical JSON
            digest       TEXT NOT NULL,   -- sha256 of body, so a receipt can name what it was built from
            recorded_at  TEXT NOT NULL
        ) STRICT"""

#: Rules: labkit.receipts (issue_receipt_txn: at most one per run, held by the primary key).
RECEIPTS_TABLE_V1 = """CREATE TABLE receipts (
            incident         TEXT PRIMARY KEY REFERENCES runs (incident),
            receipt_id       TEXT NOT NULL UNIQUE,
            evidence_digest  TEXT NOT NULL,
            report           TEXT NOT NULL,
            issued_at        TEXT NOT NULL
        ) STRICT"""

#: Rules: labkit.store (create_run_txn, advance_txn write one row per transition).
TRANSITIONS_TABLE_V1 = """CREATE TABLE transitions (
            seq            INTEGER PRIMARY KEY AUTOINCREMENT,
            incident       TEXT NOT NULL REFERENCES runs (incident),
            from_step      TEXT,
            to_step        TEXT NOT NULL,
            state_version  INTEGER NOT NULL,
            at             TEXT NOT NULL
        ) STRICT"""

#: Version 1's step order, held by the database (replaced in version 2).
STEP_MOVES_FORWARD_TRIGGER_V1 = f"""CREATE TRIGGER runs_step_moves_forward BEFORE UPDATE OF step ON runs
            WHEN {STEP_RANK_SQL.format(col='NEW.step')} < {STEP_RANK_SQL.format(col='OLD.step')}
            BEGIN SELECT RAISE(ABORT, 'a run''s step may not move backwards'); END"""

# --------------------------------------------------------------------------- schema version 2

#: The step order, held by the database as well as by labkit.store.advance_txn.
STEP_MOVES_ONE_FORWARD_TRIGGER_V2 = f"""CREATE TRIGGER runs_step_moves_one_forward BEFORE UPDATE OF step ON runs
            WHEN {STEP_RANK_SQL.format(col='NEW.step')} IS NOT {STEP_RANK_SQL.format(col='OLD.step')} + 1
              OR NEW.version IS NOT OLD.version + 1
            BEGIN SELECT RAISE(ABORT, 'a run''s step may only move one step forward, its version by one'); END"""

# --------------------------------------------------------------------------- schema version 3

#: Rules: labkit.assessments (record_assessment_txn: the original, then re-evaluations).
ASSESSMENTS_TABLE_V3 = """CREATE TABLE assessments (
            incident         TEXT NOT NULL REFERENCES runs (incident),
            seq              INTEGER NOT NULL,            -- 1 is the original; later ones are re-evaluations
            origin           TEXT NOT NULL CHECK (origin IN ('inspection', 'reevaluation')),
            kind             TEXT NOT NULL,
            summary          TEXT NOT NULL,
            signals          TEXT NOT NULL,               -- JSON list
            provider         TEXT NOT NULL,
            rules_revision   INTEGER,
            prompt_revision  TEXT,
            contract         TEXT NOT NULL,
            reason           TEXT,                        -- why a re-evaluation ran
            changed          TEXT NOT NULL DEFAULT '[]',  -- JSON list: decision inputs that differ from the one before
            at               TEXT NOT NULL,
            PRIMARY KEY (incident, seq)
        ) STRICT"""

#: Rules: labkit.versioning (migrate: explicit, logged, one transaction).
MIGRATIONS_TABLE_V3 = """CREATE TABLE migrations (
            seq           INTEGER PRIMARY KEY AUTOINCREMENT,
            from_version  INTEGER NOT NULL,
            to_version    INTEGER NOT NULL,
            runs          TEXT NOT NULL,   -- JSON list of the incidents moved
            at            TEXT NOT NULL,
            reason        TEXT NOT NULL
        ) STRICT"""

# --------------------------------------------------------------------------- schema version 4

#: Rules: labkit.effects (the effect ledger). The CHECK holds the rule the lesson is about:
#: an effect is never done without the destination's ticket.
EFFECTS_TABLE_V4 = """CREATE TABLE effects (
            incident       TEXT PRIMARY KEY REFERENCES runs (incident),
            operation_key  TEXT NOT NULL UNIQUE,   -- the Idempotency-Key of every request for this effect
            request        TEXT NOT NULL,          -- the body sent under that key (JSON): a resend is identical
            state          TEXT NOT NULL CHECK (state IN ('intended', 'uncertain', 'done', 'resolved')),
            ticket         TEXT,                   -- the destination's ticket id
            attempts       INTEGER NOT NULL DEFAULT 0,
            last_outcome   TEXT NOT NULL DEFAULT '',
            reason         TEXT,                   -- a person's resolution
            updated_at     TEXT NOT NULL,
            CHECK (state != 'done' OR ticket IS NOT NULL)
        ) STRICT"""

# --------------------------------------------------------------------------- schema version 5

#: Rules: labkit.leases. The run keeps the token of its latest lease: the fence compares it in
#: the same row as the state version.
RUNS_LEASE_TOKEN_V5 = "ALTER TABLE runs ADD COLUMN lease_token INTEGER REFERENCES leases (token)"
#: Rules: labkit.leases (claim_txn, renew, release, the fenced commit).
LEASES_TABLE_V5 = """CREATE TABLE leases (
            token       INTEGER PRIMARY KEY AUTOINCREMENT,  -- the fencing token: grows with every claim, never reused
            incident    TEXT NOT NULL REFERENCES runs (incident),
            worker      TEXT NOT NULL,
            claimed_at  TEXT NOT NULL,
            expires_at  TEXT NOT NULL,                      -- moved on by each renewal; UTC, to the millisecond
            replaces    INTEGER REFERENCES leases (token),  -- the expired lease this claim took over
            ended       TEXT CHECK (ended IN ('completed', 'released', 'failed', 'taken_over')),
            ended_at    TEXT,
            CHECK ((ended IS NULL) = (ended_at IS NULL))
        ) STRICT"""
#: Rules: labkit.leases (every claim, renewal, commit, refusal and release, in commit order).
LEASE_EVENTS_TABLE_V5 = """CREATE TABLE lease_events (
            seq            INTEGER PRIMARY KEY AUTOINCREMENT,  -- commit order: every event is written under the write lock
            token          INTEGER NOT NULL REFERENCES leases (token),
            incident       TEXT NOT NULL REFERENCES runs (incident),
            event          TEXT NOT NULL CHECK (event IN ('claimed', 'renewed', 'committed', 'refused', 'released', 'failed')),
            state_version  INTEGER NOT NULL,  -- claimed, renewed: the run's; committed: the new one; refused: the one expected
            at             TEXT NOT NULL,
            detail         TEXT NOT NULL DEFAULT ''
        ) STRICT"""

# --------------------------------------------------------------------------- schema version 6

#: Rules: labkit.evidence. The evidence row names its raw diagnostic by digest and location;
#: NULL on evidence from before they existed.
EVIDENCE_DIAGNOSTIC_DIGEST_V6 = "ALTER TABLE evidence ADD COLUMN diagnostic_digest TEXT"
EVIDENCE_DIAGNOSTIC_LOCATION_V6 = "ALTER TABLE evidence ADD COLUMN diagnostic_location TEXT"
#: Rules: labkit.evidence (store_bounded_txn writes it), labkit.retention (retain_txn removes from it).
DIAGNOSTICS_TABLE_V6 = """CREATE TABLE diagnostics (
            incident  TEXT PRIMARY KEY REFERENCES runs (incident),
            digest    TEXT NOT NULL,   -- sha256 of body; the evidence row names the same digest
            body      TEXT NOT NULL,   -- the raw diagnostic the provider read, redacted before it was written
            bytes     INTEGER NOT NULL CHECK (bytes = length(CAST(body AS BLOB))),
            kept_at   TEXT NOT NULL    -- the evidence's recorded_at: retention counts its age from here
        ) STRICT"""
#: Rules: labkit.evidence with labkit.redaction (which fields held what kind of value; never the value).
REDACTIONS_TABLE_V6 = """CREATE TABLE redactions (
            incident  TEXT NOT NULL REFERENCES runs (incident),
            part      TEXT NOT NULL CHECK (part IN ('evidence', 'diagnostic')),
            field     TEXT NOT NULL,   -- a dotted path to the field; never the value
            kind      TEXT NOT NULL,
            count     INTEGER NOT NULL CHECK (count > 0),
            PRIMARY KEY (incident, part, field, kind)
        ) STRICT"""
#: Rules: labkit.retention (retain_txn logs each retention run).
RETENTIONS_TABLE_V6 = """CREATE TABLE retentions (
            seq              INTEGER PRIMARY KEY AUTOINCREMENT,
            at               TEXT NOT NULL,
            older_than_days  REAL NOT NULL CHECK (older_than_days >= 0),
            cutoff           TEXT NOT NULL,   -- raw diagnostics kept before this instant were due
            removed          INTEGER NOT NULL,
            removed_bytes    INTEGER NOT NULL,
            kept_unfinished  INTEGER NOT NULL  -- due, but their run was unfinished: left alone
        ) STRICT"""

# --------------------------------------------------------------------------- schema version 7

#: Rules: labkit.leases. A pool's claim asks, for each free run it looks at, whether a lease on
#: that run failed (claimable_txn): without an index that is a scan of every lease, once per run
#: looked at, so `work` grew with the number of runs squared.
LEASES_BY_INCIDENT_INDEX_V7 = "CREATE INDEX leases_by_incident ON leases (incident, token)"
#: Rules: labkit.leases, labkit.invariants (the fence check asks each commit's latest claim on its run).
LEASE_EVENTS_BY_INCIDENT_INDEX_V7 = "CREATE INDEX lease_events_by_incident ON lease_events (incident, seq)"
#: Rules: labkit.leases. The unfinished runs in incident order, without walking past the finished
#: ones: a claim reads from here, and stops at the first free run (partial: a run leaves it when
#: it completes, so it holds only the backlog).
RUNS_UNFINISHED_INDEX_V7 = "CREATE INDEX runs_unfinished ON runs (incident) WHERE step != 'report_completed'"

# --------------------------------------------------------------------------- schema version 8

#: Rules: labkit.store (create_run_txn, advance_txn write one row per transition). ``seq`` is
#: still commit order without AUTOINCREMENT: every row is written under the write lock, a new
#: row's key is one above the largest, and transitions are never deleted, so no key is reused.
#: AUTOINCREMENT only added a write of ``sqlite_sequence`` (a page in the log) to every transition.
TRANSITIONS_TABLE_V8 = """CREATE TABLE transitions_v8 (
            seq            INTEGER PRIMARY KEY,  -- commit order (see above); never deleted, so never reused
            incident       TEXT NOT NULL REFERENCES runs (incident),
            from_step      TEXT,
            to_step        TEXT NOT NULL,
            state_version  INTEGER NOT NULL,
            at             TEXT NOT NULL
        ) STRICT"""

# --------------------------------------------------------------------------- the ordered list

#: Ordered schema changes. Entry n moves the database from schema version n to n+1, in the
#: same transaction that bumps ``PRAGMA user_version``. Never edit an entry; append one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the source text's components: runs, evidence, receipts, transitions (02_three_states).
    (RUNS_TABLE_V1, EVIDENCE_TABLE_V1, RECEIPTS_TABLE_V1, TRANSITIONS_TABLE_V1, STEP_MOVES_FORWARD_TRIGGER_V1),
    (
        # Version 1's trigger refused only a backward step; a sideways or skipping one
        # slipped through. The rule is exactly one step forward, with the state version
        # moving by one, held by the database as well as by advance_txn.
        "DROP TRIGGER runs_step_moves_forward",
        STEP_MOVES_ONE_FORWARD_TRIGGER_V2,
        f"PRAGMA application_id = {APPLICATION_ID}",
    ),
    (
        # Decision inputs beside each piece of evidence (NULL on rows from before them), the
        # assessments made from evidence, and the log of workflow-version migrations (08_versioning).
        "ALTER TABLE evidence ADD COLUMN provider TEXT",
        "ALTER TABLE evidence ADD COLUMN rules_revision INTEGER",
        "ALTER TABLE evidence ADD COLUMN prompt_revision TEXT",
        ASSESSMENTS_TABLE_V3,
        MIGRATIONS_TABLE_V3,
    ),
    # 4: the effect ledger: an action outside the database, under a stable operation key (09_external_effects).
    (EFFECTS_TABLE_V4,),
    # 5: leases with fencing tokens (10_leases_and_fencing): each run keeps the token of its latest
    # lease, beside the state version the fenced commit compares with it.
    (LEASES_TABLE_V5, LEASE_EVENTS_TABLE_V5, RUNS_LEASE_TOKEN_V5),
    # 6: bounded evidence (11_capacity_and_retention): the evidence row names its raw diagnostic by
    # digest and location; the raw diagnostics, what redaction replaced in each read, and the log
    # of retention runs are tables of their own.
    (
        EVIDENCE_DIAGNOSTIC_DIGEST_V6,
        EVIDENCE_DIAGNOSTIC_LOCATION_V6,
        DIAGNOSTICS_TABLE_V6,
        REDACTIONS_TABLE_V6,
        RETENTIONS_TABLE_V6,
    ),
    # 7: the indexes the commands' queries need, so that each grows linearly with the runs
    # (recover, status, work, evaluate, retain timed at 1,000 and 10,000 runs: scripts/bench.py --scale).
    (LEASES_BY_INCIDENT_INDEX_V7, LEASE_EVENTS_BY_INCIDENT_INDEX_V7, RUNS_UNFINISHED_INDEX_V7),
    # 8: transitions keep their order from the write lock, not from AUTOINCREMENT: the table is
    # rebuilt with the same rows and keys, one page fewer in the log per transition.
    (
        TRANSITIONS_TABLE_V8,
        "INSERT INTO transitions_v8 (seq, incident, from_step, to_step, state_version, at)"
        " SELECT seq, incident, from_step, to_step, state_version, at FROM transitions",
        "DROP TABLE transitions",
        "ALTER TABLE transitions_v8 RENAME TO transitions",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)

#: Every lab table, in the order snapshots and capacity reports list them.
TABLES = ("runs", "evidence", "receipts", "transitions", "assessments", "migrations", "effects", "leases", "lease_events",
          "diagnostics", "redactions", "retentions")
