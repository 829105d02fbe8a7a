"""The bench's fault backend (`bench.fault_apps.Faulty`) as tests/real/apps serves it, for the scenarios."""

from bench.fault_apps import Faulty

__all__ = ["Faulty"]
