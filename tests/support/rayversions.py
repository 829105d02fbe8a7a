"""The error Ray raises when two of its versions meet.

Moved out of tests/pure/test_rayversions.py, whose tests use them too."""

from __future__ import annotations

RAY_ERROR = (
    "Version mismatch: The cluster was started with:\n"
    "    Ray: 2.52.0\n"
    "    Python: 3.11.9\n"
    "This process on node 10.0.0.5 was started with:\n"
    "    Ray: 2.60.0\n"
    "    Python: 3.11.7\n"
)
