"""Benchmarks: one module per measurement, run together by `bench.report`.

Each measurement module takes `--tiny` (the smoke-test size) and `--json PATH`
(where its figures go), prints a table, and never asserts on time. A
microbenchmark that backs a cost claim in the data path runs alone, outside
the report: `stream_relay` (the proxy's own cost per streamed chunk).
"""
