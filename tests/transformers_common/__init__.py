"""Transformers' common model tests (v5.23.0), vendored so that gMLP is held to the library's own standard."""
