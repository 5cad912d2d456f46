"""Benchmark harness for taskq and its peers (see bench/README.md)."""
