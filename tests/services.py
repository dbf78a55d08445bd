"""Helpers for tests that start real services on loopback."""

from __future__ import annotations

from lakehouse.services.process import free_port

__all__ = ["free_port"]
