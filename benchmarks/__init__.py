"""Benchmarks: capsnotes against a straightforward CapsNet, timed side by side."""
