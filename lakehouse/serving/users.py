"""The people who may use the Spark service's endpoints (docs/operations.md, "Users and the query log").

One file, ``<home>/service/users.json``, readable and writable by its owner only (the user the
service runs as): each user's role and a salted PBKDF2-HMAC-SHA256 hash of their secret, never the
secret itself. ``lakehouse users add`` makes the secret, 32 random bytes that serve as the JDBC
password and as the Spark Connect token alike, and prints it once; nothing can show it again. The
service (``lakehouse.serving.UsersFile``, in ``java/``) reads the file again whenever it changes,
so an added or removed user counts from the next login, without a restart.

The hash is slow on purpose (200,000 iterations, about 0.2 s), so that a stolen file yields no secret
cheaply; the service pays it once per user and secret in each run, not at each request.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings
from lakehouse.vocabulary import JOBS_USER, Role, choices

HASH_SCHEME = "pbkdf2_sha256"
ITERATIONS = 200_000
SALT_BYTES = 16
SECRET_BYTES = 32
NAME = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")


def users_file(settings: Settings) -> Path:
    return settings.service_dir() / "users.json"


def hash_secret(secret: str, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    """``pbkdf2_sha256$iterations$salt$hash`` (base64), the form the service's UsersFile checks."""
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, iterations)
    return "$".join([HASH_SCHEME, str(iterations), base64.b64encode(salt).decode(), base64.b64encode(digest).decode()])


def secret_matches(stored: str, secret: str) -> bool:
    scheme, iterations, salt, _ = stored.split("$")
    return scheme == HASH_SCHEME and hmac.compare_digest(
        stored, hash_secret(secret, base64.b64decode(salt), int(iterations))
    )


def read_users(path: Path) -> dict[str, dict]:
    """Each user's entry (role, hash, added_at), by name; none when there is no file yet."""
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())["users"]
    except (ValueError, KeyError) as error:
        raise LakehouseError(f"the users file {path} is not readable ({error}): restore it or remove it") from None


@contextlib.contextmanager
def _changing(path: Path):
    """The users, to change in place and write back whole, one `lakehouse users` at a time."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with os.fdopen(os.open(path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        users = read_users(path)
        yield users
        partial = path.with_suffix(f".{os.getpid()}.partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"users": users}, handle, indent=1, sort_keys=True)
        os.replace(partial, path)


def add_user(path: Path, name: str, role: str) -> str:
    """Adds ``name`` with a new secret, returned once; only its hash is kept."""
    if not NAME.match(name) or name == JOBS_USER:
        reserved = f"; {JOBS_USER} is the platform's jobs'" if name == JOBS_USER else ""
        raise LakehouseError(
            f"a user name is a lowercase letter, then up to 63 of a-z 0-9 . _ - (not {name!r}){reserved}"
        )
    if role not in choices(Role):
        raise LakehouseError(f"unknown role {role!r}: use one of {', '.join(Role)}")
    secret = secrets.token_urlsafe(SECRET_BYTES)
    with _changing(path) as users:
        if name in users:
            raise LakehouseError(f"user {name} exists: remove it first to give it a new secret")
        users[name] = {"role": role, "hash": hash_secret(secret), "added_at": datetime.now(UTC).isoformat()}
    return secret


def remove_user(path: Path, name: str) -> None:
    with _changing(path) as users:
        if users.pop(name, None) is None:
            raise LakehouseError(f"no user {name} (`lakehouse users list` lists them)")


def list_users(path: Path) -> list[dict]:
    return [
        {"name": name, "role": u["role"], "added_at": u["added_at"]} for name, u in sorted(read_users(path).items())
    ]
