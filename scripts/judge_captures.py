"""Judge a folder of broker captures: the evidence contract's verdict on each, then the rules scored on them.

    .venv/bin/python scripts/judge_captures.py [FOLDER]     (default: data/captures/rabbitmq-3.10.8)

Each capture (what ``scripts/broker_situations.py`` wrote: one read of a live broker by the real
adapter) is shaped into a contract response exactly as a read is (:func:`labkit.provider.answer`,
with the newest rules revision writing the diagnosis) and judged by the newest contract revision.
Then every rules revision is scored on the folder as a held-out set, with the newest revision's
confusion table. ``make test-broker`` runs it on the captures it has just made on a live node.

Exit 0 when the contract accepts every capture; 1 when it refuses one (each refusal is printed with
the rule it broke: a real broker's answer the contract does not model); 2 for a folder it cannot use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labkit.contract import CONTRACT, check_evidence  # noqa: E402
from labkit.errors import BadInput, EvidenceRejected  # noqa: E402
from labkit.evaluation import capture_set, compare_rules, rules_comparison_text, score_rules  # noqa: E402
from labkit.provider import answer  # noqa: E402
from labkit.rules import LATEST_RULES_REVISION  # noqa: E402


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else ROOT / "data" / "captures" / "rabbitmq-3.10.8"
    try:
        captures = capture_set(folder)
    except (BadInput, OSError, ValueError) as problem:
        print(f"judge_captures: {problem}", file=sys.stderr)
        return 2
    refused = []
    for key, snapshot in captures.snapshots.items():
        response = answer(json.dumps(snapshot).encode("utf-8"), LATEST_RULES_REVISION)
        try:
            check_evidence(response, str(snapshot.get("incident")))
        except EvidenceRejected as refusal:
            refused.append(f"{key}: refused by rule {refusal.rule}: {refusal.field} {refusal.problem}")
    total = len(captures.snapshots)
    print(f"contract {CONTRACT} (rules revision {LATEST_RULES_REVISION} writing the diagnosis): "
          f"{total - len(refused)} of {total} captures in {folder.name} accepted")
    for line in refused:
        print("  " + line)
    print()
    print(rules_comparison_text(compare_rules([captures])))
    newest = score_rules(captures, LATEST_RULES_REVISION)
    print()
    print(f"rules revision {LATEST_RULES_REVISION} on {captures.name}: confusion (rows: what it was; columns: what the rules said)")
    predicted = sorted({kind for row in newest.confusion.values() for kind in row})
    width = max(len(kind) for kind in [*predicted, *newest.confusion]) + 1
    print(" " * width + " ".join(f"{kind:>{width}}" for kind in predicted))
    for actual, row in newest.confusion.items():
        print(f"{actual:<{width}}" + " ".join(f"{row.get(kind, 0):>{width}}" for kind in predicted))
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
