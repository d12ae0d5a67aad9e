"""The benchmarks: `benchmarks.speed` (speed and memory) and `benchmarks.quality`, sharing `benchmarks.common`."""
