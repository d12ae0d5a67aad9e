"""The project's benchmarks: `benchmarks.speed` (speed and memory) and `benchmarks.quality` (quality), with what
they share in `benchmarks.common` and `benchmarks.baseline`."""
