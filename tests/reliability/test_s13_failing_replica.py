"""Scenario 13: one replica of three starts answering 500 to half its requests under load (issue 46).

The backend is the bench's fault backend (`bench.fault_apps.Faulty`), deployed healthy; the fault is its
`user_config` turning to mode "5xx" in place: the first replica to take it answers 500 to half its
requests from then on. The endpoint retries (`[retries]`, a 20 % budget) and ejects outliers
(`[outliers]`: 5 errors in a row, 2 s times the ejection count, replaced at the third), so the load
sees at most 0.5 % failed and the replica is replaced; recovery is the fault to the replacement running.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.load import SteadyLoad
from tests.support.scenario import record_run, under_load
from tests.support.serving import Serving
from tests.support.stack import eventually, met, run
from vocabulary.control.status import RestartReason
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.traffic_policy import OutliersConfig, RetriesConfig

RETRIES = RetriesConfig(attempts=3, retry_on=("replica-died", "500", "502", "503", "504"), budget_percent=20,
                        backoff_s=0.005, max_backoff_s=0.05)
OUTLIERS = OutliersConfig(consecutive_errors=5, base_ejection_s=2, replace_after=3)


def test_a_replica_failing_half_its_requests_is_retried_around_ejected_and_replaced(
    serving: Serving, backend: str, window_s: float, tmp_path: Path
) -> None:
    claim = tmp_path / "faulty-replica"
    healthy = {"mode": "ok"}
    serving.deploy(backend, 3, import_path="fault_backend:Faulty", init_args=("ok",), user_config=healthy)
    endpoint = EndpointConfig(name=backend, route=f"/{backend}", traffic={backend: 1.0}, retries=RETRIES,
                              outliers=OUTLIERS)
    met(serving.client, run(serving.client.apply_endpoint(endpoint)), 60)
    started = {r.replica_id for r in serving.replicas(backend, "RUNNING")}
    seen: dict[str, str] = {}

    def half_failing(_: SteadyLoad) -> float:
        began = time.monotonic()
        faulty = {"mode": "5xx", "fraction": 0.5, "claim": str(claim)}
        serving.deploy(backend, 3, import_path="fault_backend:Faulty", init_args=("ok",), user_config=faulty)
        bad = eventually(lambda: claim.read_text() if claim.exists() else "", 30, what="a replica claiming the fault")
        seen["bad"] = bad

        def replaced() -> bool:
            status = serving.status().backends[backend]
            running = {r.replica_id for r in status.replicas if r.state == "RUNNING"}
            return status.restarts.get(RestartReason.EJECTED, 0) >= 1 and len(running) == 3 and bad not in running

        eventually(replaced, 90, what="the replica ejected three times replaced")
        return time.monotonic() - began

    report, recovery_s = under_load(serving.load_url(backend), window_s, half_failing)
    leaked = serving.leaked()
    status = serving.status().backends[backend]
    running = {r.replica_id for r in status.replicas if r.state == "RUNNING"}
    record_run("13", "one replica of 3 answers 500 to half its requests (retries, outlier ejection)", report,
               recovery_s, leaked, note="recovery = fault to the replica ejected 3 times replaced")
    assert report.failed <= report.requests * 0.005, report.summary()
    assert seen["bad"] in started and len(running - started) == 1, (seen, started, running)
    assert status.restarts == {RestartReason.EJECTED: 1}
    assert leaked == 0
