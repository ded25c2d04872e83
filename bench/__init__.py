"""Encore's benchmarks: ``python bench/run.py [--quick] [--json]`` (see BENCHMARKS.md)."""
