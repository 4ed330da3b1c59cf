"""The write lock, measured: the reference flow (read inside the transaction) against the leased flow.

    python scripts/measure_leases.py [--delay S] [--workers N ...] [--incidents N] [--lease-seconds S]

For each worker count (default 1, 2 and 4), both flows finish the same runs (default: every
shipped incident) with a provider that takes ``--delay`` seconds per read (default 0.2), in
real worker processes started together. Printed per flow and count: runs per second, how
long each run held SQLite's write lock (summed over its transactions), the longest single
hold, and how long a second writer waited for the lock while they ran. The figures come from
this machine as it is now: a loaded machine gives slower, noisier numbers. They are printed,
never compared with stored ones (labkit.lab.locks.measure_flows; 10_leases_and_fencing).
"""

from __future__ import annotations

import argparse
import os
import sys

import labkit
from labkit.lab.locks import measure_flows, measurement_table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per provider read (default 0.2)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="worker counts (default 1 2 4)")
    parser.add_argument("--incidents", type=int, default=None, help="how many shipped incidents to run (default all)")
    parser.add_argument("--lease-seconds", type=float, default=5.0, help="the leased flow's time to live (default 5)")
    args = parser.parse_args(argv)
    incidents = labkit.list_incidents()[: args.incidents] if args.incidents else None
    runs = len(incidents or labkit.list_incidents())
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"provider delay {args.delay:g} s, {runs} runs per measurement, {os.cpu_count()} cores, load average {load}")
    results = measure_flows(workers=args.workers, provider_delay=args.delay, incidents=incidents, lease_seconds=args.lease_seconds)
    print(measurement_table(results))
    for count in args.workers:
        held = {r.flow: r.lock_ms_per_run for r in results if r.workers == count}
        print(f"{count} worker{'s' * (count != 1)}: the leased flow holds the lock {held['leased']:.1f} ms per run, "
              f"{held['leased'] / held['in-transaction']:.1%} of the in-transaction flow's {held['in-transaction']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
