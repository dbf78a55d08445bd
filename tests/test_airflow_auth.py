"""Airflow's sign-in files, as lakehouse.ops.airflow_auth writes them for scripts/airflow.sh: the
users' passwords, FAB's webserver_config.py in each mode, and the test directory's LDIF. The
running FAB auth manager and slapd are tested in tests/test_airflow_e2e.py."""

from __future__ import annotations

import base64
import hashlib
import stat

from lakehouse.ops.airflow_auth import (
    DIRECTORY_PEOPLE,
    Login,
    directory_ldif,
    generate_missing_passwords,
    main,
    ssha,
    webserver_config,
)

BASE_DN = "dc=lakehouse,dc=test"


def settings_of(login: Login) -> dict:
    """The names webserver_config.py defines, as Flask's from_pyfile loads them."""
    names: dict = {}
    exec(compile(webserver_config(login, "ldap://127.0.0.1:3389", BASE_DN), "webserver_config.py", "exec"), names)
    return names


def test_passwords_are_generated_once_for_the_missing_users_only_readable_by_their_owner(tmp_path):
    path = tmp_path / "passwords.json"
    first = generate_missing_passwords(path, ["admin", "viewer"])
    again = generate_missing_passwords(path, ["admin", "viewer", "operator"])
    assert set(first) == {"admin", "viewer"} and set(again) == {"operator"}
    assert all(len(password) >= 24 for password in [*first.values(), *again.values()])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert generate_missing_passwords(path, ["admin", "viewer", "operator"]) == {}


def test_database_login_checks_fab_users_and_the_directory_maps_each_group_onto_its_role():
    from flask_appbuilder.const import AUTH_DB, AUTH_LDAP

    database, directory = settings_of(Login.DATABASE), settings_of(Login.DIRECTORY)
    assert database["AUTH_TYPE"] == AUTH_DB and "AUTH_LDAP_SERVER" not in database
    assert directory["AUTH_TYPE"] == AUTH_LDAP and directory["AUTH_LDAP_SERVER"] == "ldap://127.0.0.1:3389"
    assert directory["AUTH_LDAP_USERNAME_FORMAT"] % "vera" == f"uid=vera,ou=people,{BASE_DN}"
    assert directory["AUTH_ROLES_MAPPING"] == {
        f"cn=airflow-admins,ou=groups,{BASE_DN}": ["Admin"],
        f"cn=airflow-operators,ou=groups,{BASE_DN}": ["Op"],
        f"cn=airflow-viewers,ou=groups,{BASE_DN}": ["Viewer"],
    }
    # A person in none of the groups may do nothing; a person's roles follow the directory.
    assert directory["AUTH_USER_REGISTRATION_ROLE"] == "Public" and directory["AUTH_ROLES_SYNC_AT_LOGIN"] is True


def test_the_directory_holds_salted_hashes_and_adds_people_before_the_groups_naming_them():
    passwords = {uid: f"secret-of-{uid}" for uid in DIRECTORY_PEOPLE}
    ldif = directory_ldif(BASE_DN, passwords)
    assert not any(password in ldif for password in passwords.values())
    hashed = [line.split(" ", 1)[1] for line in ldif.splitlines() if line.startswith("userPassword: ")]
    for value, password in zip(hashed, passwords.values(), strict=True):
        raw = base64.b64decode(value.removeprefix("{SSHA}"))
        assert hashlib.sha1(password.encode() + raw[20:]).digest() == raw[:20]
    last_person = max(ldif.index(f"dn: uid={uid},") for uid in DIRECTORY_PEOPLE)
    assert last_person < ldif.index("dn: cn=airflow-admins,") and ssha("x") != ssha("x")


def test_a_misspelt_login_or_an_unknown_command_is_refused_with_exit_2_and_writes_nothing(tmp_path, capsys):
    config = tmp_path / "webserver_config.py"
    assert main(["check-login", "ldap"]) == 2
    assert main(["webserver-config", str(config), "ldap", "ldap://127.0.0.1:3389", BASE_DN]) == 2
    assert main(["frobnicate"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "lakehouse: error: AIRFLOW_LOGIN='ldap': use database or directory",
        "lakehouse: error: AIRFLOW_LOGIN='ldap': use database or directory",
        "lakehouse: error: unknown command 'frobnicate'",
    ]
    assert not config.exists() and main(["check-login", "directory"]) == 0
