"""Benchmarks: the platform measured side by side with what a user could run instead.

Every figure is a ratio against a baseline measured in the same run (the machine is shared and
noisy), plus the absolute numbers. ``python -m bench`` (``make bench``) runs them all; ``--smoke``
runs each at a tiny size so CI proves the scripts still work.
"""
