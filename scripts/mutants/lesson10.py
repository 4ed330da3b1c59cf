"""Bugs for lesson 10 (10_leases_and_fencing): each breaks one claim the lesson shows."""

_T10 = "tests/lab/test_lesson10_leased_read.py"
_LEASES = "tests/mechanisms/test_leases.py"

MUTANTS: list[dict] = [
    dict(
        name="leased-read-inside-the-lock",
        claim="the leased flow reads the provider with no lock held: another worker commits meanwhile",
        path="labkit/worker.py",
        old="        reading = self._call_renewing(lease) if renew else read_with_diagnostic(self.provider, lease.incident)\n",
        new=("        with transaction(self.conn):\n"
             "            reading = self._call_renewing(lease) if renew else read_with_diagnostic(self.provider, lease.incident)\n"),
        unit_tests=(f"{_T10}::test_another_process_commits_a_run_while_the_leased_worker_is_inside_its_read",),
        issue26=True,
    ),
    dict(
        name="fence-version-only",
        claim="the fence compares the token too: B took over but has not committed, A's commit is refused",
        path="labkit/leases.py",
        old='FENCE = "version = :expected_version AND lease_token = :token"',
        new='FENCE = "version = :expected_version"',
        unit_tests=(_LEASES,),
    ),
    dict(
        name="fence-token-only",
        claim="the fence compares the state version too: the run moved on without a lease, A's commit is refused",
        path="labkit/leases.py",
        old='FENCE = "version = :expected_version AND lease_token = :token"',
        new='FENCE = "lease_token = :token"',
        unit_tests=(_LEASES,),
    ),
    dict(
        name="fence-token-by-size",
        claim="a token is compared for equality, never by size: another run's larger token is refused",
        path="labkit/leases.py",
        old='FENCE = "version = :expected_version AND lease_token = :token"',
        new='FENCE = "version = :expected_version AND lease_token <= :token"',
        unit_tests=(_LEASES,),
    ),
    dict(
        name="live-lease-taken-over",
        claim="a run whose lease is live cannot be claimed by another worker (LeaseHeld)",
        path="labkit/leases.py",
        old='        if now < row["expires_at"]:\n            raise LeaseHeld(',
        new='        if now < row["expires_at"] and False:\n            raise LeaseHeld(',
        unit_tests=(_LEASES,),
    ),
    dict(
        name="renewal-after-expiry",
        claim="a renewal needs a live lease: after expiry the worker must claim again",
        path="labkit/leases.py",
        old="        if now >= mine.expires_at:",
        new="        if now >= mine.expires_at and False:",
        unit_tests=(_LEASES,),
    ),
    dict(
        name="refusal-leaves-no-event",
        claim="a refused commit writes only a refused event, which the lease log shows",
        path="labkit/leases.py",
        old='        _event_txn(conn, lease.token, lease.incident, "refused", lease.state_version, now,',
        new='        _event_txn(conn, lease.token, lease.incident, "claimed", lease.state_version, now,',
        unit_tests=(_LEASES,),
    ),
    dict(
        name="renewal-keeps-the-old-expiry",
        claim="a renewal moves the lease's expiry to now + TTL, so the live worker keeps its run",
        path="labkit/leases.py",
        old='        conn.execute("UPDATE leases SET expires_at = ? WHERE token = ?", (expires, lease.token))',
        new='        conn.execute("UPDATE leases SET expires_at = expires_at WHERE token = ? AND ? IS NOT NULL", (lease.token, expires))',
        unit_tests=(_LEASES,),
    ),
]
