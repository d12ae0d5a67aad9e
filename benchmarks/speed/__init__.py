"""Speed and memory benchmarks, one module per section (`python -m benchmarks.speed --help`)."""
