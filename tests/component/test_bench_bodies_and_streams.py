"""The pure parts of `bench.payloads` and `bench.streams`: what wrk is told and read, ratios, gap quantiles."""

from __future__ import annotations

from typing import Any

from bench import wrk
from bench.payloads import carried_bytes, ratio_rows
from bench.streams import Gaps

WRK_OUTPUT = """Running 1s test @ http://127.0.0.1:8000/
  2 threads and 8 connections
  Latency Distribution
     50%  310.00us
     99%   10.40ms
  2799 requests in 1.00s, 175.09MB read
  Non-2xx or 3xx responses: 12
Requests/sec:   2799.00
"""


def spread(value: float) -> dict[str, float]:
    return {"median": value, "min": value, "max": value, "n": 1}


def row(system: str, mb_s: float, size: int = 1 << 20) -> dict[str, Any]:
    return {"system": system, "handler": "echo", "size": size, "connections": 32, "mb_s": spread(mb_s)}


def test_wrk_output_gives_the_requests_sent_and_those_refused() -> None:
    parsed = wrk.parse(WRK_OUTPUT)

    assert (parsed["requests"], parsed["non_2xx"], parsed["p50_ms"]) == (2799, 12, 0.31)


def test_the_post_script_sends_a_body_of_the_asked_size() -> None:
    script = wrk.post_script(65536)

    assert 'wrk.method = "POST"' in script and 'string.rep("x", 65536)' in script


def test_an_echo_carries_its_body_both_ways_and_a_consumer_answers_1_kib() -> None:
    assert carried_bytes("echo", 1000) == 2000
    assert carried_bytes("consume", 1000) == 1000 + 1024


def test_ours_is_compared_with_serves_fastest_and_the_fastest_bare_app() -> None:
    rows = [row("ours", 300), row("serve-direct", 200), row("serve-haproxy", 600), row("uvicorn", 400),
            row("granian", 1000)]

    [ratio] = ratio_rows(rows)

    assert ratio["serve_fastest"] == "serve-haproxy" and ratio["vs_serve"] == 0.5
    assert ratio["vs_uvicorn"] == 0.75 and (ratio["bare_fastest"], ratio["vs_bare"]) == ("granian", 0.3)


def test_gap_quantiles_come_from_the_millisecond_histogram() -> None:
    gaps = Gaps()
    gaps.add(0.050, 98)
    gaps.add(0.0, 1)
    gaps.add(0.700)

    assert gaps.quantile_ms(0.5) == 51 and gaps.quantile_ms(0.999) == 701 and gaps.total == 100
