"""Every benchmark runs at its tiny size and the runner turns the figures into the report.

One run of `python -m bench.report --tiny --jobs 2` (each measurement in its
own process, two at a time, real Ray, real HTTP on loopback) feeds every
test below. Ray Serve
is measured too when it is installed (the `bench` extra), at this size only
by the proxy bench (`bench.stacks.TINY_WITH_SERVE`: the other
Serve stacks run in `make bench`, which keeps `make test` in its budget);
without it our side still runs. Asserts that figures exist and make sense,
never how fast.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import stacks
from bench.report import MEASUREMENTS, NO_PLOTS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.real, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "bench.report", "--tiny", "--jobs", "2", "--out", str(out)],
                   cwd=ROOT, env=env, check=True, timeout=2300)
    return out


@pytest.fixture(scope="module")
def measured(report: Path) -> dict[str, Any]:
    return json.loads((report / "latest.json").read_text())


def figures(measured: dict[str, Any], name: str) -> dict[str, Any]:
    return measured["measurements"][name]["figures"]


def systems(measurement: str) -> set[str]:
    """Who `measurement` measures at the tiny size (Serve too only where `bench.stacks.TINY_WITH_SERVE` says)."""
    return set(stacks.systems(measurement, tiny=True))


def test_every_measurement_ran(measured: dict[str, Any]) -> None:
    assert measured["failures"] == {}
    assert set(measured["measurements"]) == set(MEASUREMENTS)


def test_every_measurement_records_the_machine_and_its_command(measured: dict[str, Any]) -> None:
    for name, doc in measured["measurements"].items():
        assert doc["machine"]["cores"] > 0 and doc["machine"]["memory_gb"] > 0, name
        assert doc["command"].startswith(f"python -m bench.{name}"), doc["command"]


def test_proxy_bench_serves_requests_through_our_proxy_without_errors(measured: dict[str, Any]) -> None:
    ours = [r for r in figures(measured, "proxy")["runs"] if r["system"] == "ours"]

    assert ours and all(r["rps"]["median"] > 0 and r["non_2xx"] == 0 for r in ours)


def test_proxy_bench_measures_serve_when_it_is_installed(measured: dict[str, Any]) -> None:
    measured_systems = {r["system"].split("-")[0] for r in figures(measured, "proxy")["runs"]}

    assert measured_systems & {"ours", "serve"} == systems("proxy")


def test_update_latency_times_every_change(measured: dict[str, Any]) -> None:
    got = figures(measured, "update_latency")

    assert set(got) - {"changes"} == systems("update_latency")
    for system in systems("update_latency"):
        for kind in got[system].values():
            assert len(kind["samples"]) == got["changes"] and all(s > 0 for s in kind["samples"])


def test_rollout_counts_the_requests_sent_during_it(measured: dict[str, Any]) -> None:
    got = figures(measured, "rollout")

    for system in systems("rollout"):
        assert got[system]["requests"] > 0 and got[system]["total_s"]["median"] > 0


def test_faults_time_the_recovery_of_the_controller_and_the_proxy(measured: dict[str, Any]) -> None:
    got = figures(measured, "faults")

    for system in systems("faults"):
        assert set(got[system]) == {"controller", "proxy"}
        assert all(role["recovery_s"]["median"] > 0 for role in got[system].values())


def test_reconcile_measures_every_size_and_its_growth(measured: dict[str, Any]) -> None:
    got = figures(measured, "reconcile")

    assert [r["specs"] for r in got["rows"]] == [10, 100]
    assert math.isfinite(got["growth"]["cold_s"][0]["growth"])


def test_fanout_measures_one_change_at_each_size(measured: dict[str, Any]) -> None:
    rows = figures(measured, "fanout")["rows"]

    assert [r["endpoints"] for r in rows] == [10, 100]
    assert all(0 < r["pushed_bytes"] < r["broadcast_bytes"] for r in rows)


def test_memory_reads_each_process_of_our_stack(measured: dict[str, Any]) -> None:
    got = figures(measured, "memory")["ours"]

    for state in ("idle", "load"):
        assert all(got[state][role] > 0 for role in ("agent", "controller", "proxy", "replica")), got[state]


def test_report_has_the_targets_table(report: Path) -> None:
    assert "Where we stand against the targets" in (report / "REPORT.md").read_text()


def test_report_shows_the_plots_or_says_why_not(report: Path) -> None:
    text = (report / "REPORT.md").read_text()
    plots = ("proxy_noop.png", "reconcile.png", "memory.png", "payloads.png", "streams.png", "density.png")

    if importlib.util.find_spec("matplotlib") is None:  # the `bench` extra is not installed
        assert NO_PLOTS in text and not any((report / plot).exists() for plot in plots)
    else:
        assert all((report / plot).stat().st_size > 0 and f"]({plot})" in text for plot in plots)


def test_serving_bench_measures_batching_handles_and_streaming_per_system(measured: dict[str, Any]) -> None:
    got = figures(measured, "serving")["systems"]

    assert set(got) == systems("serving")
    for system in got.values():
        assert system["model"]["rps"] > 0 and system["batched"]["rps"] > 0
        assert system["handles"]["p50_ms"] > 0
        assert "skipped" in system["stream"] or system["stream"]["chunks_per_s"] > 0


def test_proxy_profile_shares_add_up_to_the_whole(measured: dict[str, Any]) -> None:
    got = figures(measured, "proxy_profile")

    assert "skipped" in got or abs(sum(row["share"] for row in got["rows"]) - 1) < 1e-6
    assert "skipped" in got or "proxy/app.py" in got["crossed"]["proxy"]


def test_payloads_bench_carries_bodies_through_our_proxy_and_reads_its_cpu(measured: dict[str, Any]) -> None:
    ours = [r for r in figures(measured, "payloads")["runs"] if r["system"] == "ours"]

    assert ours and all(r["mb_s"]["median"] > 0 and r["non_2xx"] + r["socket_errors"] == 0 for r in ours)
    assert all(r["proxy_cpu_ms_per_mb"]["median"] > 0 and r["replica_cpu_ms_per_mb"]["median"] > 0 for r in ours)


def test_streams_bench_holds_every_stream_to_its_last_event(measured: dict[str, Any]) -> None:
    ours = [r for r in figures(measured, "streams")["runs"] if r["system"] == "ours"]

    assert ours and all(r["failed"] == 0 and r["events"] == r["events_expected"] > 0 for r in ours)
    assert all(r["gap_p99_ms"] >= r["period_ms"] for r in ours)


def test_density_bench_starts_every_replica_and_reads_their_memory(measured: dict[str, Any]) -> None:
    [ours] = [r for r in figures(measured, "density")["runs"] if r["system"] == "ours"]

    assert ours["replica_processes"] == ours["replicas"] and ours["replica_pss_mb"] > 0
    assert ours["ready_s"] > 0 and ours["route_table_bytes"] > 0


def test_report_has_a_section_for_each_of_issue_35s_measurements(report: Path) -> None:
    text = (report / "REPORT.md").read_text()

    assert all(title in text for title in ("## Bodies: 1 KiB to 16 MiB", "## Open streams", "## Density"))


def test_models_bench_fetches_once_and_affinity_loads_fewer_models_than_random(
    measured: dict[str, Any], report: Path
) -> None:
    got = figures(measured, "models")
    assert got["cold_fetched_bytes"] > 0 and got["hit_fetched_bytes"] == 0
    assert got["four_at_once_fetched_bytes"] == got["cold_fetched_bytes"]  # one fetch per node
    oci = got["oci"]  # an oci:// modelcar from a loopback docker-registry, beside a plain blob download
    assert oci["cold_fetched_bytes"] > 8 * 1024 * 1024 and oci["hit_fetched_bytes"] == 0
    assert oci["fetch_vs_plain"] > 0 and oci["cold_stage_vs_plain"] > 0
    hub = got["hub"]  # an hf:// repository from a loopback Hub, beside a plain download of its weights
    assert hub["cold_fetched_bytes"] > 8 * 1024 * 1024 and hub["hit_fetched_bytes"] == 0
    assert hub["fetch_vs_plain"] > 0 and hub["cold_stage_vs_plain"] > 0
    plex = got["multiplexing"]
    # 8 models fit in 2 replicas x 4 slots: with affinity each loads once, on the real stack too.
    assert plex["real_replicas_used"] == 2
    assert plex["real_affinity_loads_per_1000"] == plex["affinity_loads_per_1000"] == 8 * 1000 / plex["requests"]
    assert plex["random_loads_per_1000"] > 3 * plex["affinity_loads_per_1000"]
    text = (report / "REPORT.md").read_text()
    assert "## Models: fetching into a node's cache, and many models per replica" in text
    assert "Hugging Face (`hf://`): a repository of" in text


def test_routing_bench_measures_each_policy_on_both_workloads_next_to_serves_router(measured: dict[str, Any]) -> None:
    got = figures(measured, "routing")
    expected = {("ours", "prefix_affinity"), ("ours", "power_of_two")}
    if "serve" in systems("routing"):
        expected |= {("serve", "prefix_cache_affinity"), ("serve", "power_of_two")}

    for workload in ("shared", "unshared"):
        runs = [r for r in got["runs"] if r["workload"] == workload]
        assert {(r["system"], r["policy"]) for r in runs} == expected, workload
        assert all(r["requests"] == got["conversations"] * got["turns"] for r in runs)
        assert all(0 < r["ttft_mean_s"] <= r["ttft_p99_s"] and r["output_tokens_per_s"] > 0 for r in runs)
    shared = [r for r in got["runs"] if r["workload"] == "shared"]
    assert all(r["cached_share"] > 0 for r in shared)  # later turns find their earlier turns cached somewhere
    assert {(r["policy"], r["key"]) for r in got["decision_us"]} >= {("power_of_two", "–"), ("prefix_affinity", "json:messages")}


def test_report_has_the_routing_section(report: Path) -> None:
    assert "## Routing policies on an LLM (issue 30)" in (report / "REPORT.md").read_text()


def test_audit_bench_measures_tracing_and_capture_against_off_without_errors(measured: dict[str, Any], report: Path) -> None:
    rows = {r["config"]: r for r in figures(measured, "audit")["rows"]}

    assert set(rows) == {"tracing 0%", "tracing 1%", "tracing 100%", "capture 10%", "capture 100%"}
    assert all(r["rps"] > 0 and r["off_rps"] > 0 and r["non_2xx"] == 0 for r in rows.values())
    assert rows["capture 100%"]["records_written"] + rows["capture 100%"]["records_dropped"] > 0
    assert "## The audit trail's cost (issue 31)" in (report / "REPORT.md").read_text()


def test_llm_endpoint_bench_measures_the_proxy_and_the_engine_served_directly(measured: dict[str, Any],
                                                                              report: Path) -> None:
    got = figures(measured, "llm_endpoint")

    assert {(r["system"], r["concurrency"]) for r in got["runs"]} == {("direct", 1), ("ours", 1), ("direct", 4),
                                                                      ("ours", 4)}
    for r in got["runs"]:
        assert r["ttft_p50_s"]["n"] == got["rounds"] and 0 < r["ttft_p50_s"]["median"] <= r["ttft_p99_s"]["median"]
        assert r["ttft_p50_s"]["median"] < r["request_p50_s"]["median"]
        assert r["request_tokens_per_s"]["median"] > 0 and r["output_tokens_per_s"]["median"] > 0
    assert [o["concurrency"] for o in got["overhead"]] == [1, 4]
    paced = got["paced"]  # the same engine at a GPU model's pace: a first token no sooner than its prefill
    assert {(r["system"], r["concurrency"]) for r in paced["runs"]} == {(s, c) for s in ("direct", "ours") for c in (1, 4)}
    assert all(r["ttft_p50_s"]["median"] >= paced["first_s"] for r in paced["runs"])
    assert [o["concurrency"] for o in paced["overhead"]] == [1, 4]
    text = (report / "REPORT.md").read_text()
    assert "## The OpenAI endpoint through our proxy (issue 43)" in text and "at a GPU model's pace" in text


def test_grpc_bench_calls_our_proxy_and_grpcio_without_errors(measured: dict[str, Any], report: Path) -> None:
    got = figures(measured, "grpc")
    expected = {"ours", "grpcio"} | ({"serve-direct"} if "serve" in systems("grpc") else set())

    assert {(r["system"], r["call"]) for r in got["runs"]} == {(s, call) for s in expected for call in ("noop", "v2")}
    for r in got["runs"]:
        assert r["calls"] > 0 and r["errors"] == 0, r
        assert r["calls_per_s"]["n"] == got["rounds"] and 0 < r["p50_ms"]["median"] <= r["p99_ms"]["median"]
    assert {r["call"] for r in got["ratios"]} == {"noop", "v2"} and all(r["vs_grpcio"] > 0 for r in got["ratios"])
    assert "## gRPC through our proxy (issue 45)" in (report / "REPORT.md").read_text()
