"""Bugs for lesson 07 (07_evidence_contract): each breaks one claim the lesson shows."""

MUTANTS: list[dict] = []
