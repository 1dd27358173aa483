"""Triage, beside the report: a failed job's log scanned in constant memory for its first fatal
failure (scan), the rank, node and device that emitted it (ranks) and the remedies for its family
(remedies)."""
