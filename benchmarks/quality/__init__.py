"""The quality benchmark (`python -m benchmarks.quality --help`)."""
