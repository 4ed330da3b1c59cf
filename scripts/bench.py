"""Timings of what the lessons pay for; speed is measured here, never asserted in tests.

    python scripts/bench.py [--repeat N] [--scale N1 N2 ...] [--scale-only]

The benchmark of labkit against bare SQLite and the frameworks is ``python -m labkit bench``
(labkit/lab/bench.py); ``make bench`` runs both. This script times the lessons' own moves, printing
medians over N repetitions (default 5) of:
- every incident driven end to end in process (synchronous=FULL; `labkit bench` counts the commits);
- one `python -m labkit run` child process (what every crash experiment costs);
- one crash round trip per crash point: a killed child, then `recover` in another child;
- with ``--scale``, the scale table (labkit/lab/scale.py): recover, status --json, evaluate,
  retain and work --workers 4 at each size, with the growth exponent between the first and last.

"In process" times what ``labkit bench`` times for labkit: the database is opened (connected,
schema migrated) before the clock starts and its log is not checkpointed inside the timing, so
the two measures agree on what they time: the incidents' transactions and the provider's reads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import labkit
from labkit.lab import scale


def median_seconds(action, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=int, nargs="*", default=[], metavar="N", help="also time the commands at N runs each")
    parser.add_argument("--scale-only", action="store_true", help="only the scale table")
    args = parser.parse_args(argv)
    repeat = args.repeat
    if not args.scale_only:
        lesson_timings(repeat)
    if args.scale:
        with tempfile.TemporaryDirectory(prefix="labkit-scale-") as folder:
            timings, startup = scale.measure(tuple(args.scale), Path(folder), progress=lambda t: print(
                f"  {t.command} at {t.runs:,} runs: {t.seconds:.2f} s", flush=True))
        print(scale.scale_table(timings, startup))
    return 0


def lesson_timings(repeat: int) -> None:
    incidents = labkit.list_incidents()

    with tempfile.TemporaryDirectory() as folder:
        counter = iter(range(10**6))

        def fresh_db() -> Path:
            return Path(folder) / f"bench-{next(counter)}.db"

        samples = []
        for _ in range(repeat):
            db = fresh_db()
            with closing(labkit.connect(db)) as conn:  # connect and schema before the clock, as `labkit bench` does
                coordinator = labkit.Coordinator(conn, labkit.ReferenceProvider(labkit.call_log_for(db)))
                started = time.perf_counter()
                for incident in incidents:
                    coordinator.drive(incident)
                samples.append(time.perf_counter() - started)
        per_batch = statistics.median(samples)
        print(f"in process: {len(incidents)} incidents end to end in {per_batch * 1000:.0f} ms "
              f"({per_batch / len(incidents) * 1000:.1f} ms per incident, synchronous=FULL; connect and schema not timed)")

        child = median_seconds(lambda: labkit.lab.run_in_child(fresh_db(), incidents[0]), repeat)
        print(f"child process: one `python -m labkit run` in {child * 1000:.0f} ms")

        for point in labkit.RUN_POINTS:  # the effect and lease points need a ticket service or `work`
            def round_trip(point: str = point) -> None:
                db = fresh_db()
                crashed = labkit.lab.run_in_child(db, incidents[0], crash_at=point)
                recovered = labkit.lab.labkit_cli("recover", "--db", db)
                assert crashed.killed_by == "SIGKILL" and recovered.returncode == 0, (crashed, recovered)

            print(f"crash round trip at {point:<25} {median_seconds(round_trip, repeat) * 1000:6.0f} ms")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
