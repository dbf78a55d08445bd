"""Airflow's auth manager: FAB's, with its API tokens throttled per name.

FAB limits its sign-in form's posts per client address (``AUTH_RATE_LIMITED``), but not
``POST /auth/token``, where automation trades a name and password for a token: a guesser there
could try passwords as fast as the api-server hashes them or the directory binds. This manager
checks a token's password only within the name's allowance (lakehouse.ops.failed_logins); a try
within the name's wait gets 429 with the wait left, unchecked. FAB's documentation names
``create_token`` as the method to override. Each api-server process counts for itself (the
platform runs one, Airflow's default).

``AIRFLOW__CORE__AUTH_MANAGER=lakehouse.ops.airflow_auth_manager.ThrottledFabAuthManager``
(scripts/airflow.sh, docker/compose.yaml).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.fab.auth_manager.fab_auth_manager import FabAuthManager
from fastapi import HTTPException, status

from lakehouse.ops.failed_logins import FailedLogins, TooManyFailures

# One per api-server process: its request threads share it.
TOKEN_LOGINS = FailedLogins()


def login_name(body: dict[str, Any]) -> str:
    """The name a token request counts against: FAB matches names without regard to case
    (AUTH_USERNAME_CI), so neither does the count, or ``Viewer`` would get a new allowance."""
    return str(body.get("username") or "").strip().casefold()


class ThrottledFabAuthManager(FabAuthManager):
    """FAB's auth manager; a token's password is checked only within its name's allowance."""

    def create_token(self, headers: dict[str, str], body: dict[str, Any]):
        name = login_name(body)
        if not name or not body.get("password"):
            return super().create_token(headers, body)  # FAB's own 400 for a missing field
        try:
            TOKEN_LOGINS.claim(name)
        except TooManyFailures as refused:
            raise HTTPException(
                status_code=status.HTTP_429_TOO_MANY_REQUESTS,
                detail=str(refused),
                headers={"Retry-After": str(refused.wait_left)},
            ) from None
        user = None
        try:
            user = super().create_token(headers, body)
        finally:
            TOKEN_LOGINS.settled(name, user is not None)
        return user
