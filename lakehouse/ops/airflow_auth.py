"""Who may sign in to Airflow, and as what: the FAB auth manager's users and roles in Airflow's
PostgreSQL, and the directory (LDAP) whose groups map onto the same roles.

scripts/airflow.sh calls this module's commands (docs/airflow.md, "Who may do what"):

    python -m lakehouse.ops.airflow_auth check-login LOGIN        # database or directory, else exit 2
    python -m lakehouse.ops.airflow_auth passwords FILE USER...   # generate the missing passwords
    python -m lakehouse.ops.airflow_auth webserver-config FILE LOGIN LDAP_URI BASE_DN
    python -m lakehouse.ops.airflow_auth directory DIR BASE_DN PASSWORDS ADMIN_PASSWORD_FILE
    python -m lakehouse.ops.airflow_auth users PASSWORDS          # FAB's users, in Airflow's database

Generated passwords go to files of mode 600 and are printed once, when generated, as `make airflow`
has always shown them; nothing here has a default password.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import sys
from enum import StrEnum
from pathlib import Path

from lakehouse.errors import LakehouseError


class Login(StrEnum):
    """Where Airflow checks a password: FAB's users in Airflow's database, or the directory."""

    DATABASE = "database"
    DIRECTORY = "directory"


class PlatformRole(StrEnum):
    """The platform's three roles, each one of FAB's built-in roles: Admin does everything; Op
    triggers, clears and marks runs (backfills too) and edits pools and variables; Viewer reads."""

    ADMIN = "Admin"
    OPERATOR = "Op"
    VIEWER = "Viewer"


# The platform's database users, one per role (AIRFLOW_LOGIN=database signs people in with them;
# with the directory they remain the automation's accounts for API tokens).
DATABASE_USERS = {"admin": PlatformRole.ADMIN, "operator": PlatformRole.OPERATOR, "viewer": PlatformRole.VIEWER}
# The directory's groups, each mapped onto a role (AUTH_ROLES_MAPPING), and its people: a test
# directory of one person per group, which scripts/airflow.sh serves with slapd.
DIRECTORY_GROUPS = {
    "airflow-admins": PlatformRole.ADMIN,
    "airflow-operators": PlatformRole.OPERATOR,
    "airflow-viewers": PlatformRole.VIEWER,
}
DIRECTORY_PEOPLE = {"ada": "airflow-admins", "otto": "airflow-operators", "vera": "airflow-viewers"}
# Directory people who belong to no group get no permission at all.
NO_ROLE = "Public"
PASSWORD_BYTES = 18  # 24 characters of URL-safe base64


def generate_missing_passwords(path: Path, users: list[str]) -> dict[str, str]:
    """Add a generated password for each user the JSON file at ``path`` lacks (mode 600); return
    the new ones. Existing passwords are kept: a restart changes nobody's."""
    known = json.loads(path.read_text()) if path.exists() else {}
    new = {user: secrets.token_urlsafe(PASSWORD_BYTES) for user in users if user not in known}
    if new:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(known | new, handle)
    os.chmod(path, 0o600)
    return new


def ssha(password: str) -> str:
    """An LDAP userPassword / rootpw value: salted SHA-1, the scheme every slapd checks natively."""
    salt = secrets.token_bytes(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


def group_dn(group: str, base_dn: str) -> str:
    return f"cn={group},ou=groups,{base_dn}"


def person_dn(uid: str, base_dn: str) -> str:
    return f"uid={uid},ou=people,{base_dn}"


def webserver_config(login: Login, ldap_uri: str, base_dn: str) -> str:
    """FAB's webserver_config.py: database users, or a direct bind as uid=NAME,ou=people,BASE_DN
    with roles from the person's memberOf groups, synced at every login (a person moved to another
    group has the new role at their next login)."""
    common = "from flask_appbuilder.const import AUTH_DB, AUTH_LDAP\n\nWTF_CSRF_ENABLED = True\n"
    if login == Login.DATABASE:
        return common + "AUTH_TYPE = AUTH_DB\n"
    mapping = {group_dn(group, base_dn): [role.value] for group, role in DIRECTORY_GROUPS.items()}
    return common + (
        "AUTH_TYPE = AUTH_LDAP\n"
        f"AUTH_LDAP_SERVER = {ldap_uri!r}\n"
        f"AUTH_LDAP_USERNAME_FORMAT = {person_dn('%s', base_dn)!r}\n"
        f"AUTH_LDAP_SEARCH = {'ou=people,' + base_dn!r}\n"
        "AUTH_LDAP_UID_FIELD = 'uid'\n"
        "AUTH_LDAP_GROUP_FIELD = 'memberOf'\n"
        "AUTH_LDAP_FIRSTNAME_FIELD = 'givenName'\n"
        "AUTH_LDAP_LASTNAME_FIELD = 'sn'\n"
        "AUTH_LDAP_EMAIL_FIELD = 'mail'\n"
        "AUTH_USER_REGISTRATION = True\n"
        f"AUTH_USER_REGISTRATION_ROLE = {NO_ROLE!r}\n"
        f"AUTH_ROLES_MAPPING = {mapping!r}\n"
        "AUTH_ROLES_SYNC_AT_LOGIN = True\n"
    )


def slapd_conf(data_dir: Path, base_dn: str, root_password_hash: str) -> str:
    """slapd's configuration: one MDB database with the memberOf overlay (FAB reads a person's
    groups from memberOf); passwords can only be checked, never read, and only signed-in people read."""
    schema = "/etc/ldap/schema"
    return (
        "".join(f"include {schema}/{name}.schema\n" for name in ("core", "cosine", "inetorgperson"))
        + f"pidfile {data_dir}/slapd.pid\n"
        + "modulepath /usr/lib/ldap\nmoduleload back_mdb\nmoduleload memberof\n"
        + f"database mdb\nsuffix {base_dn!r}\nrootdn 'cn=admin,{base_dn}'\n".replace("'", '"')
        + f"rootpw {root_password_hash}\ndirectory {data_dir}/db\nmaxsize 16777216\n"
        + "overlay memberof\n"
        + "access to attrs=userPassword by self =xw by anonymous auth by * none\n"
        + "access to * by users read by * none\n"
    )


def directory_ldif(base_dn: str, passwords: dict[str, str]) -> str:
    """The test directory: its people (with hashed passwords) first, then groups naming them, so
    the memberOf overlay fills each person's memberOf as the groups are added."""
    domain = base_dn.split(",")[0].split("=")[1]
    entries = [
        f"dn: {base_dn}\nobjectClass: dcObject\nobjectClass: organization\ndc: {domain}\no: {domain}\n",
        *(f"dn: ou={unit},{base_dn}\nobjectClass: organizationalUnit\nou: {unit}\n" for unit in ("people", "groups")),
    ]
    for uid in DIRECTORY_PEOPLE:
        entries.append(
            f"dn: {person_dn(uid, base_dn)}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()}\n"
            f"sn: {uid.title()}\ngivenName: {uid.title()}\nmail: {uid}@{domain}.test\n"
            f"userPassword: {ssha(passwords[uid])}\n"
        )
    for group in DIRECTORY_GROUPS:
        members = "".join(f"member: {person_dn(uid, base_dn)}\n" for uid, g in DIRECTORY_PEOPLE.items() if g == group)
        entries.append(f"dn: {group_dn(group, base_dn)}\nobjectClass: groupOfNames\ncn: {group}\n{members}")
    return "\n".join(entries)


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (mode 600), whatever the umask."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def prepare_directory(data_dir: Path, base_dn: str, passwords_file: Path, admin_password: str) -> dict[str, str]:
    """Write slapd.conf and the test directory's LDIF under ``data_dir`` (both mode 600); return the
    people's passwords generated now.

    Args:
        data_dir: the directory's folder; slapd's database goes in its ``db/``.
        base_dn: the directory's suffix, e.g. ``dc=lakehouse,dc=test``.
        passwords_file: the people's passwords (JSON, mode 600); missing ones are generated.
        admin_password: the password of ``cn=admin,<base_dn>``, which loads the people and groups.
    """
    (data_dir / "db").mkdir(parents=True, exist_ok=True)
    new = generate_missing_passwords(passwords_file, list(DIRECTORY_PEOPLE))
    passwords = json.loads(passwords_file.read_text())
    write_private(data_dir / "slapd.conf", slapd_conf(data_dir, base_dn, ssha(admin_password)))
    write_private(data_dir / "directory.ldif", directory_ldif(base_dn, passwords))
    return new


def ensure_database_users(passwords: dict[str, str]) -> list[str]:
    """Create the platform's database users that FAB lacks, each with its role and its password
    from the file; reset a user whose role or password differs. Returns what it did, user by user."""
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder
    from werkzeug.security import check_password_hash

    done = []
    with get_application_builder() as appbuilder:
        manager = appbuilder.sm
        if any(manager.find_role(role.value) is None for role in PlatformRole):
            manager.sync_roles()
        for username, role_name in DATABASE_USERS.items():
            role, user = manager.find_role(role_name.value), manager.find_user(username=username)
            if user is None:
                manager.add_user(username, username, "(platform)", f"{username}@localhost", role, passwords[username])
                done.append(f"created {username} ({role_name.value})")
            elif not check_password_hash(user.password, passwords[username]) or user.roles != [role]:
                user.roles = [role]
                manager.update_user(user)
                manager.reset_password(user.id, passwords[username])
                done.append(f"reset {username} ({role_name.value})")
    return done


def print_new(new: dict[str, str], kept_in: Path) -> None:
    for user, password in new.items():
        print(f"Generated {user} password (shown once; kept in {kept_in}): {password}")


def parse_login(text: str) -> Login:
    """AIRFLOW_LOGIN's value, or a clear error naming the values it may take."""
    if text not in set(Login):
        raise LakehouseError(f"AIRFLOW_LOGIN={text!r}: use {' or '.join(Login)}")
    return Login(text)


def run(command: str, args: list[str]) -> None:
    if command == "check-login":
        parse_login(args[0])
    elif command == "passwords":
        print_new(generate_missing_passwords(Path(args[0]), args[1:]), Path(args[0]))
    elif command == "webserver-config":
        write_private(Path(args[0]), webserver_config(parse_login(args[1]), args[2], args[3]))
    elif command == "directory":
        data_dir, base_dn, passwords_file, admin_password_file = args
        admin_password = Path(admin_password_file).read_text().strip()
        print_new(
            prepare_directory(Path(data_dir), base_dn, Path(passwords_file), admin_password), Path(passwords_file)
        )
    elif command == "users":
        print("\n".join(ensure_database_users(json.loads(Path(args[0]).read_text()))))
    else:
        raise LakehouseError(f"unknown command {command!r}")


def main(argv: list[str]) -> int:
    try:
        run(argv[0], argv[1:])
    except LakehouseError as error:
        print(f"lakehouse: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
