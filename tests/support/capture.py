"""Counts of what request capture wrote, for the capture tests.

Moved out of tests/component/test_capture.py, whose tests use them too."""

from __future__ import annotations


class Counts:
    def __init__(self) -> None:
        self.results: list[str] = []

    def __call__(self, result: str) -> None:
        self.results.append(result)
