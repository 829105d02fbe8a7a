"""Benchmarks: one module per measurement, run together by `bench.report`.

Each measurement module takes `--tiny` (the smoke-test size) and `--json PATH`
(where its figures go), prints a table, and never asserts on time.
"""
