"""An environment's status as the status page reads it, for the status tests.

Moved out of tests/component/test_status_environment.py, whose tests use them too."""

from __future__ import annotations

from tests.support.status_tables import SHA

ENVIRONMENT = {
    "name": "staging",
    "branch": "env/staging",
    "held": {"commit": "f" * 40, "reason": "SyncWindow", "until": "2026-11-27T07:00:00Z",
             "message": "deny window deny '0 22 * * 1-5' for 36000s (Europe/Berlin) is open until 2026-11-27T07:00:00Z"},
    "promotion": {
        "to": "prod", "branch": "env/prod", "mode": "push", "commit": SHA, "phase": "Soaking", "message": "",
        "soaked_s": 12.5, "soak_s": 900.0, "error": None,
        "gates": [{"name": "soak", "passed": None, "detail": "served 12s of 900s"},
                  {"name": "no_backend_errors", "passed": True, "detail": "0 of 40 answers were 5xx"}],
    },
}
