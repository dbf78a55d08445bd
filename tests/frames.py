"""Tiny inline DataFrames for the Spark unit tests (built in the JVM: see lakehouse.frames)."""

from lakehouse.frames import literal_frame as inline_frame

__all__ = ["inline_frame"]
