"""What each principal may do on the broker of ``lakehouse kafka start``: its SCRAM credentials, its
ACLs and the project's topics, set up as the admin through Kafka's Admin API at each start.

The grants are for the settings' topic prefix (``LAKEHOUSE_KAFKA_TOPIC_PREFIX``): each producer may
write (and describe) its topic alone; the reader may read and describe every topic of the project and
the platform's consumer groups (lakehouse.storage.kafka_auth.GROUP_PREFIX), and write nothing. The
admin, a super user, creates the topics with the log's retention; no other principal may create one.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import KAFKA_CREDENTIALS, Settings
from lakehouse.storage import kafka_auth
from lakehouse.storage.kafka_log import CLIENT_TIMEOUT_SECONDS, create_topic

SCRAM_ITERATIONS = 8192


def project_topics(settings: Settings) -> list[str]:
    """The project's log topics (before the prefix): a pipeline's own, shared by the pipelines that extend it."""
    from lakehouse.project.active import active_project

    return sorted({spec.topic for spec in active_project(settings).pipelines.values()})


def principals(topics: list[str]) -> list[str]:
    """Every principal but the admin: the reader and a producer per topic."""
    return [kafka_auth.READER, *(kafka_auth.producer(topic) for topic in topics)]


def ensure_passwords(file: Path, names: list[str]) -> dict[str, str]:
    """Each principal's password from the broker's credentials file, generated once for a new one."""
    passwords = kafka_auth.saved_passwords(file)
    missing = {name: secrets.token_urlsafe(24) for name in names if name not in passwords}
    if missing:
        kafka_auth.save_passwords(file, {**passwords, **missing})
    return {**passwords, **missing}


def acl_grants(topic_names: dict[str, str]) -> list[tuple[str, str, str, str, str]]:
    """(principal, resource type, pattern, resource name, operation) of every grant, for each topic
    (before the prefix) and its full name."""
    grants = []
    for topic, name in topic_names.items():
        # DESCRIBE_CONFIGS: a producer reads its topic's retention, and refuses what it would delete.
        for operation in ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"):
            grants.append((kafka_auth.producer(topic), "TOPIC", "LITERAL", name, operation))
        for operation in ("READ", "DESCRIBE"):
            grants.append((kafka_auth.READER, "TOPIC", "LITERAL", name, operation))
    for operation in ("READ", "DESCRIBE"):
        grants.append((kafka_auth.READER, "GROUP", "PREFIXED", kafka_auth.GROUP_PREFIX, operation))
    return grants


def _acl_binding(principal: str, resource: str, pattern: str, name: str, operation: str):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(
        ResourceType[resource],
        name,
        ResourcePatternType[pattern],
        f"User:{principal}",
        "*",
        AclOperation[operation],
        AclPermissionType.ALLOW,
    )


def _wait(futures, what: str) -> None:
    from confluent_kafka import KafkaException

    try:
        for future in futures.values():
            future.result(timeout=CLIENT_TIMEOUT_SECONDS)
    except KafkaException as error:
        raise LakehouseError(f"could not {what} on the Kafka broker: {error}") from None


def grant(settings: Settings, bootstrap: str) -> dict:
    """The principals' credentials, ACLs and topics on the broker at ``bootstrap``, as its admin;
    idempotent. Returns what a client needs: the variables that point it at the broker and its
    credentials file (the broker's certificate authority beside it), and each role's principal."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    topics, credentials = project_topics(settings), settings.kafka_dir() / KAFKA_CREDENTIALS
    passwords = ensure_passwords(credentials, principals(topics))
    as_admin = settings.replace(
        kafka_bootstrap=bootstrap, kafka_user="", kafka_password="", kafka_credentials="", kafka_ca=""
    )
    admin = AdminClient(kafka_auth.client_config(as_admin, kafka_auth.ADMIN))
    scram = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upserts = [UserScramCredentialUpsertion(name, scram, passwords[name].encode()) for name in principals(topics)]
    _wait(admin.alter_user_scram_credentials(upserts), "set the principals' passwords")
    names = {topic: settings.kafka_topic(topic) for topic in topics}
    _wait(admin.create_acls([_acl_binding(*grant) for grant in acl_grants(names)]), "grant the ACLs")
    for topic in topics:
        create_topic(as_admin, topic, kafka_auth.ADMIN)
    # The authority beside the credentials file is the one a client given that file trusts.
    return {
        "credentials": str(credentials),
        "authority": str(as_admin.kafka_ca_file()),
        "variables": {"LAKEHOUSE_KAFKA_BOOTSTRAP": bootstrap, "LAKEHOUSE_KAFKA_CREDENTIALS": str(credentials)},
        "reader": kafka_auth.READER,
        "producers": {names[topic]: kafka_auth.producer(topic) for topic in topics},
    }
