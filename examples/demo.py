"""The demo: check every example request against AGN-034 and print its InvokeResult.

Run by ``make demo``. The requests in ``examples/requests/`` cover the three
scenarios (new session, follow-on, tool continuation) and a set of requests the
contract refuses; each result names the failing rule ids and fields.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aptix_pipeline.validators import classify_request, parse_request

REQUESTS = Path(__file__).resolve().parent / "requests"


def main() -> int:
    """Print one InvokeResult per example request and a summary line."""
    valid = 0
    files = sorted(REQUESTS.glob("*.json"))
    for path in files:
        result = parse_request(path.read_bytes())
        if result.result is not None:
            valid += 1
            verdict = f"valid {classify_request(result.result)} request"
        else:
            verdict = "refused: " + ", ".join(result.rule_ids)
        print(f"\n== {path.name} — {verdict}")
        print(result.to_json(indent=2))
    print(f"\n{valid} valid, {len(files) - valid} refused, {len(files)} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
