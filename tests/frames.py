"""Tiny inline DataFrames for the Spark unit tests (built in the JVM: see lakehouse.storage.frames)."""

from lakehouse.storage.frames import literal_frame as inline_frame

__all__ = ["inline_frame"]
