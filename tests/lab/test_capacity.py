"""The capacity model against a database labkit really filled, and where one SQLite file stops.

The simulated workloads here are small (hundreds of incidents, not the year of notebook 11)
so the file runs in seconds; the model is held to the same tolerance at every size.
"""

from __future__ import annotations

import math
import sqlite3
from contextlib import closing

import pytest

import labkit
from labkit.lab import capacity
from labkit.lab.capacity import TOLERANCE, check_model, predict, predict_by_day, record_bytes, simulate, writer_contention
from labkit.lab.lesson import restart_answers

# --------------------------------------------------------------------------- SQLite's record format


def test_record_sizes_follow_sqlites_file_format(tmp_path):
    """The model's record arithmetic against SQLite's own count of a table's payload (the dbstat table)."""
    values = [("INC-1001", 2, "report_completed", 2, "2026-03-02T09:00:00Z", None), (0, 1, -1, 127, 128, 2**31, 2**47, 1.5, b"\x00" * 300),
              ("é" * 70, "x" * 5000, 3.0, None)]
    with closing(sqlite3.connect(tmp_path / "r.db")) as conn:
        try:
            conn.execute("SELECT * FROM dbstat LIMIT 1")
        except sqlite3.OperationalError:
            pytest.skip("this SQLite is built without the dbstat table")
        for number, row in enumerate(values):
            conn.execute(f"CREATE TABLE t{number} ({', '.join(f'c{i}' for i in range(len(row)))})")
            conn.execute(f"INSERT INTO t{number} VALUES ({', '.join('?' * len(row))})", row)
        conn.commit()
        for number, row in enumerate(values):
            payload = conn.execute("SELECT SUM(payload) FROM dbstat WHERE name = ?", (f"t{number}",)).fetchone()[0]
            assert record_bytes(row) == payload, row[:3]


@pytest.mark.parametrize("size", [100, 4000, 4061, 4062, 4100, 9000, 20_000, 100_000])
def test_large_rows_spill_into_as_many_overflow_pages_as_sqlite_uses(tmp_path, size):
    """One row of ``size`` bytes of text: the pages the model gives it against SQLite's own page list."""
    with closing(sqlite3.connect(tmp_path / "o.db")) as conn:
        try:
            conn.execute("SELECT * FROM dbstat LIMIT 1")
        except sqlite3.OperationalError:
            pytest.skip("this SQLite is built without the dbstat table")
        text = next("x" * n for n in range(size, size - 6, -1) if record_bytes(["x" * n]) == size)  # a record of `size` bytes
        conn.execute("CREATE TABLE t (body TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", [(text,)] * 20)
        conn.commit()
        assert conn.execute("SELECT SUM(payload) FROM dbstat WHERE name = 't'").fetchone()[0] == 20 * size
        measured = conn.execute("SELECT COUNT(*) FROM dbstat WHERE name = 't' AND pagetype = 'overflow'").fetchone()[0]
        leaves = conn.execute("SELECT COUNT(*) FROM dbstat WHERE name = 't' AND pagetype = 'leaf'").fetchone()[0]
        pages = conn.execute("SELECT COUNT(*) FROM dbstat WHERE name = 't'").fetchone()[0]
    packing = capacity._pack([size] * 20, index=False)
    assert round(packing.overflow_per_cell * 20) == measured
    assert math.ceil(20 / packing.cells_per_leaf) == leaves
    assert capacity._tree_pages(20, packing) == pages, "leaves, the interior page above them, and the overflow"


# --------------------------------------------------------------------------- the model against the measurement


@pytest.mark.parametrize(("days", "per_day", "retention", "inline"), [
    (45, 12, 7, False),     # raw diagnostics kept apart, a week of them at a time
    (20, 15, None, False),  # kept apart and never removed
    (30, 12, None, True),   # inline in the evidence row
])
def test_the_model_predicts_the_simulated_database_within_its_tolerance(tmp_path, days, per_day, retention, inline):
    comparison = check_model(tmp_path, days=days, incidents_per_day=per_day, retention_days=retention, raw_inline=inline)
    simulation, prediction = comparison.simulation, comparison.prediction
    assert abs(comparison.error) <= TOLERANCE, f"predicted {prediction.bytes}, measured {simulation.bytes} ({comparison.error:+.1%})"
    assert simulation.path.stat().st_size == simulation.bytes, "measured: the file on disk, after a checkpoint"
    for table in ("runs", "evidence", "assessments", "receipts", "transitions", "diagnostics", "retentions"):
        assert prediction.rows.get(table, 0) == simulation.rows[table], table
    assert prediction.naive_bytes < 0.85 * simulation.bytes, "rows times bytes misses pages, cells and indexes"
    row = comparison.as_row()
    assert row["incidents"] == days * per_day and row["error"] == f"{comparison.error:+.1%}"
    assert prediction.table()[0]["table"] == ("evidence" if inline or retention else "diagnostics")


def test_a_model_without_page_arithmetic_would_miss(tmp_path, monkeypatch):
    """The tolerance is not loose: pack every row as if pages were filled to the byte, and the model misses."""
    def filled_to_the_byte(payloads, *, index, page_size=capacity.PAGE_SIZE, rowid=100_000):
        mean = sum(payloads) / len(payloads)
        return capacity._Packing((page_size - 8) / (mean + 6), 0.0, 400)

    honest = check_model(tmp_path, days=20, incidents_per_day=12, retention_days=None)
    monkeypatch.setattr(capacity, "_pack", filled_to_the_byte)
    sloppy = predict(12, 3, None, None, 20)
    assert abs(honest.error) <= TOLERANCE
    assert abs((sloppy.bytes - honest.simulation.bytes) / honest.simulation.bytes) > TOLERANCE


def test_rows_follow_the_workload():
    year = predict(100, 3, None, 30, 365)
    assert year.incidents == 36_500
    assert year.rows["transitions"] == 109_500 and year.rows["receipts"] == 36_500
    assert year.rows["diagnostics"] == 3_100, "30 days of raw diagnostics plus today's"
    assert predict(100, 5, None, 30, 365).rows["transitions"] == 182_500
    forever = predict(100, 3, None, None, 365)
    inline = predict(100, 3, None, None, 365, raw_inline=True)
    assert year.bytes < 0.7 * inline.bytes and "diagnostics" not in inline.rows
    assert inline.bytes < forever.bytes < 1.02 * inline.bytes, "kept apart for ever costs what inline costs, and the reference"
    seed = predict(100, 3, 2048, 30, 365)
    assert seed.summary_bytes == 2048 and seed.bytes > year.bytes, "the seed's 2 KB summaries against labkit's ~1.1 KB"
    assert predict(100, 3, None, 30, 365, raw_bytes=50_000).bytes > 2 * year.bytes - year.bytes // 2


def test_by_day_the_curve_grows_and_retention_flattens_the_raw_part():
    apart = predict_by_day(90, 100, retention_days=7)
    inline = predict_by_day(90, 100, raw_inline=True)
    assert [day for day, _ in apart] == list(range(1, 91))
    assert all(b2 > b1 for (_, b1), (_, b2) in zip(apart, apart[1:], strict=False))
    assert inline[-1][1] > apart[-1][1]
    daily_late = apart[-1][1] - apart[-2][1]
    daily_inline = inline[-1][1] - inline[-2][1]
    assert daily_late < daily_inline, "past the retention window, a day adds only its summaries"
    assert predict_by_day(3, 10) == [(day, predict(10, 3, None, None, day).bytes) for day in (1, 2, 3)]


@pytest.mark.parametrize(("name", "value"), [
    ("incidents_per_day", 0), ("incidents_per_day", -5), ("incidents_per_day", 2.5), ("days", 0), ("checkpoints_per_incident", True),
    ("evidence_bytes", float("nan")), ("evidence_bytes", -1), ("retention_days", float("nan")), ("retention_days", -1),
])
def test_a_workload_that_is_not_one_is_refused(name, value):
    arguments = {"incidents_per_day": 100, "checkpoints_per_incident": 3, "evidence_bytes": None, "retention_days": None, "days": 10}
    arguments[name] = value
    with pytest.raises(capacity.BadWorkload) as refused:
        predict(**arguments)
    assert name in str(refused.value)


# --------------------------------------------------------------------------- the simulated database is a labkit database


def test_the_simulated_database_is_one_labkit_can_use(tmp_path):
    simulation = simulate(tmp_path / "sim.db", days=12, incidents_per_day=8, retention_days=3)
    assert simulation.incidents == 96 and [day for day, _ in simulation.sizes] == list(range(1, 13))
    assert simulation.rows["diagnostics"] == 8 * 4 and simulation.rows["retentions"] == 12
    with closing(labkit.connect_readonly(simulation.path)) as conn:
        steps = conn.execute("SELECT step, COUNT(*) FROM runs GROUP BY step").fetchall()
        assert [tuple(row) for row in steps] == [("report_completed", 96)]
        assert conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == 96
        times = conn.execute("SELECT MIN(created_at), MAX(created_at) FROM runs").fetchone()
        assert tuple(times)[0].startswith("2026-01-01T") and tuple(times)[1].startswith("2026-01-12T"), "a pinned clock, a day apart"
    old, recent = restart_answers(simulation.path, "D000-000"), restart_answers(simulation.path, "D011-007")
    assert (old.read_again, old.summary_exists, recent.summary_exists) == (False, True, True)
    assert labkit.retention.diagnostic_of(simulation.path, "D000-000").state == "removed"
    assert labkit.retention.diagnostic_of(simulation.path, "D011-007").state == "kept"
    report = labkit.retention.retain(simulation.path, 1, labkit.TickingClock("2026-01-13T00:00:00Z"))
    assert len(report.removed) == 24 and report.kept_recent == 8 and report.bytes_after < report.bytes_before


def test_simulate_refuses_to_overwrite_and_bad_figures(tmp_path):
    existing = tmp_path / "lab.db"
    existing.write_bytes(b"mine")
    with pytest.raises(capacity.BadWorkload, match="no file exists yet"):
        simulate(existing, days=1, incidents_per_day=1)
    assert existing.read_bytes() == b"mine"
    for bad in ({"days": 0}, {"days": 1000}, {"incidents_per_day": 1000}, {"retention_days": float("nan")}):
        with pytest.raises(capacity.BadWorkload):
            simulate(tmp_path / "new.db", **{"days": 1, "incidents_per_day": 1, **bad})
    assert not (tmp_path / "new.db").exists()
    with pytest.raises(labkit.errors.DatabaseFolderMissing):
        simulate(tmp_path / "no" / "such.db", days=1, incidents_per_day=1)


def test_size_by_day_gives_the_notebook_both_layouts_measured_and_predicted(tmp_path):
    rows = capacity.size_by_day(tmp_path, days=21, incidents_per_day=10, retention_days=5, every=7)
    assert [row["day"] for row in rows] == [7, 14, 21]
    last = rows[-1]
    measured_inline, predicted_inline = last["raw inline, measured MB"], last["raw inline, predicted MB"]
    measured_apart, predicted_apart = last["kept apart (5 days), measured MB"], last["kept apart (5 days), predicted MB"]
    assert measured_apart < measured_inline
    assert abs(predicted_inline - measured_inline) <= TOLERANCE * measured_inline + 0.01
    assert abs(predicted_apart - measured_apart) <= TOLERANCE * measured_apart + 0.01
    inline = next(tmp_path.glob("inline-*.db"))
    with pytest.raises(capacity.BadWorkload):
        capacity.size_table(simulate(tmp_path / "a.db", days=2, incidents_per_day=1, raw_inline=True),
                            simulate(tmp_path / "b.db", days=3, incidents_per_day=1), every=1)
    assert inline.exists()


# --------------------------------------------------------------------------- one writer at a time


def test_more_writers_do_not_commit_faster_than_the_one_lock_allows(tmp_path):
    """Each commit holds the lock 5 ms: no number of writer processes passes 200 commits a second."""
    rows = writer_contention(tmp_path, (1, 3), commits=12, hold_ms=5)
    assert [(row.writers, row.commits, row.busy_failures) for row in rows] == [(1, 12, 0), (3, 36, 0)]
    for row in rows:
        assert row.commits_per_second <= 1000 / 5 * 1.05, row
    assert rows[1].wait_ms_max >= 5, "with three writers someone waited for the lock"
    assert set(rows[0].as_row()) >= {"writers", "commits/s", "wait for the lock, median (ms)", "longest (ms)"}
    assert list(tmp_path.iterdir()) == [], "the measurement cleans up its files"


def test_a_simulation_reports_each_day_done_and_writes_the_same_bytes_with_or_without_listening(tmp_path):
    """Lesson 11's progress bar listens to ``on_day``; listening must not change what is written."""
    heard: list[int] = []
    listened = capacity.simulate(tmp_path / "a.db", days=4, incidents_per_day=3, on_day=heard.append)
    quiet = capacity.simulate(tmp_path / "b.db", days=4, incidents_per_day=3)
    assert heard == [1, 2, 3]
    assert listened.bytes == quiet.bytes
