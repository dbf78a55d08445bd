"""Who a Kafka client is: SASL/SCRAM-SHA-512 principals, one per role, and where their passwords live.

The broker of ``lakehouse kafka start`` generates a password per principal at its first start and
keeps them in its home's ``kafka/credentials.json`` (readable by its owner only): the admin (a super
user: the broker's own connections, topic creation, ACLs), one producer per topic (WRITE on that
topic alone) and one reader (READ on the topics and on the ``lakehouse-`` consumer groups: the
stream, backfills, the archive and the audit). A client takes its principal from
``LAKEHOUSE_KAFKA_USER`` (its password from ``LAKEHOUSE_KAFKA_PASSWORD``, else from the credentials
file) or, unset, the principal of its role from the credentials file
(``LAKEHOUSE_KAFKA_CREDENTIALS``, by default the home's broker's); with neither, it connects without
authentication, to a broker that asks for none. A client with credentials connects over TLS and
checks the broker's certificate against the broker's authority (``LAKEHOUSE_KAFKA_CA``, by default
``tls/ca.crt`` beside the credentials file), and the name it dials against the certificate's.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings

MECHANISM = "SCRAM-SHA-512"
# A client with credentials logs in over TLS: its password and the records never cross a network in clear.
PROTOCOL = "SASL_SSL"
ADMIN = "lakehouse-admin"
READER = "lakehouse-reader"
# Every consumer group of the platform starts with it (the reader's ACL on groups is this prefix):
# the archive's and audit's consumers, and Spark's Kafka source through its groupIdPrefix.
GROUP_PREFIX = "lakehouse-"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
CLIENT_TIMEOUT_SECONDS = 30
# librdkafka logs each failed connection to stderr; through this logger instead, which says
# nothing unless the process configures logging: a refusal becomes one line (``refusal``).
CLIENT_LOG = logging.getLogger("lakehouse.kafka")
CLIENT_LOG.addHandler(logging.NullHandler())


def producer(topic: str) -> str:
    """The principal that writes a topic (before the deployment's prefix): one per pipeline's log."""
    return f"lakehouse-producer-{topic}"


def saved_passwords(file: Path) -> dict[str, str]:
    """Each principal's password, from a credentials file (none: empty)."""
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as error:
        raise LakehouseError(f"cannot read the Kafka credentials {file}: {error}") from None


def save_passwords(file: Path, passwords: dict[str, str]) -> None:
    """Kept readable by its owner only: the broker and its clients read it, nobody else."""
    file.parent.mkdir(parents=True, exist_ok=True)
    file.touch(mode=0o600)
    file.chmod(0o600)
    file.write_text(json.dumps(passwords, indent=1, sort_keys=True))


def identity(settings: Settings, principal: str) -> tuple[str, str] | None:
    """(user, password) a client connects as, for a role whose principal is ``principal``; None: no
    authentication (no user set and no credentials file)."""
    user = settings.kafka_user or principal
    password = settings.kafka_password or saved_passwords(settings.kafka_credentials_file()).get(user)
    if password:
        return user, password
    if settings.kafka_user:
        raise LakehouseError(
            f"no password for Kafka user {user}: set LAKEHOUSE_KAFKA_PASSWORD, or LAKEHOUSE_KAFKA_CREDENTIALS "
            "to a credentials file that holds it"
        )
    return None


def client_config(settings: Settings, principal: str) -> dict:
    """librdkafka's configuration (confluent_kafka) of a client of the settings' brokers."""
    config = {"bootstrap.servers": settings.kafka_bootstrap}
    found = identity(settings, principal)
    if found:
        user, password = found
        config |= {
            "security.protocol": PROTOCOL,
            "ssl.ca.location": str(authority(settings)),
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": password,
        }
    return config


def authority(settings: Settings) -> Path:
    """The certificate authority a client with credentials checks the broker against."""
    found = settings.kafka_ca_file()
    if not found.is_file():
        raise LakehouseError(
            f"no certificate authority for Kafka's TLS at {found}: set LAKEHOUSE_KAFKA_CA to the file "
            "`lakehouse kafka start` prints"
        )
    return found


def connect(client_class, settings: Settings, principal: str, **config):
    """A confluent_kafka client (``client_class``) as ``principal``, and the list its errors go to."""
    errors: list = []
    client = client_class(
        {**client_config(settings, principal), **config, "error_cb": errors.append, "logger": CLIENT_LOG}
    )
    return client, errors


def _who(settings: Settings, principal: str) -> str:
    found = identity(settings, principal)
    return f"user {found[0]}" if found else "a client without credentials"


def refusal(settings: Settings, principal: str, errors: list) -> LakehouseError | None:
    """Why the broker turned a client away, as one line, when its errors say: its credentials were
    refused, or it had none and the broker closed the connection (it asks for them)."""
    codes = {error.name() for error in errors}
    if "_AUTHENTICATION" in codes:
        return LakehouseError(
            f"Kafka at {settings.kafka_bootstrap} refused {_who(settings, principal)}: authentication failed "
            "(a wrong password, or no such user)"
        )
    if "_SSL" in codes:
        failed = next(error for error in errors if error.name() == "_SSL")
        return LakehouseError(
            f"Kafka at {settings.kafka_bootstrap}: TLS failed ({failed.str().split(': ')[-1]}): the broker's "
            f"certificate must be signed by the authority in {settings.kafka_ca_file()} (LAKEHOUSE_KAFKA_CA) and name "
            "the host dialled"
        )
    if codes & {"_TRANSPORT", "_ALL_BROKERS_DOWN"} and identity(settings, principal) is None:
        return LakehouseError(
            f"Kafka at {settings.kafka_bootstrap} closed the connection of a client without credentials (or is "
            "down): set LAKEHOUSE_KAFKA_USER and LAKEHOUSE_KAFKA_PASSWORD, or LAKEHOUSE_KAFKA_CREDENTIALS to the "
            "file `lakehouse kafka start` prints"
        )
    return None


def not_authorized(settings: Settings, principal: str, action: str, topic: str) -> LakehouseError:
    """The one line of a topic the principal may not use as it means to.

    Args:
        settings: the brokers and the client's credentials.
        principal: the principal of the client's role.
        action: what it meant to do (read, write).
        topic: the topic's full name.
    """
    return LakehouseError(
        f"Kafka at {settings.kafka_bootstrap} does not let {_who(settings, principal)} {action} topic {topic}"
    )


def topic_metadata(settings: Settings, principal: str, connected, topic: str, action: str = "read"):
    """The topic's metadata once the broker answers (None: no such topic); a refusal, a topic the
    principal may not see, or no answer in 30 s is a one-line error.

    Args:
        settings: the brokers and the client's credentials.
        principal: the principal of the client's role.
        connected: the client and its errors, from :func:`connect`.
        topic: the topic's full name.
        action: what the client means to do, for the error when the principal may not see the topic.
    """
    from confluent_kafka import KafkaException

    client, errors = connected
    deadline = time.monotonic() + CLIENT_TIMEOUT_SECONDS
    while True:
        try:
            found = client.list_topics(topic, timeout=2).topics.get(topic)
            break
        except KafkaException as error:
            client.poll(0)  # hands the client's errors to its error callback
            errors.append(error.args[0])
            refused = refusal(settings, principal, errors)
            if refused or time.monotonic() > deadline:
                raise refused or LakehouseError(f"Kafka at {settings.kafka_bootstrap}: {error.args[0].str()}") from None
    if found is not None and found.error is not None:
        if found.error.name() == "UNKNOWN_TOPIC_OR_PART":
            return None
        if found.error.name() == "TOPIC_AUTHORIZATION_FAILED":
            raise not_authorized(settings, principal, action, topic)
        raise LakehouseError(f"Kafka at {settings.kafka_bootstrap}, topic {topic}: {found.error.str()}")
    return found


def jaas(user: str, password: str) -> str:
    """A SCRAM login for a Java client (Spark's Kafka source, the broker's own connections)."""
    return f'{SCRAM_LOGIN} required username="{user}" password="{password}";'


def spark_options(settings: Settings) -> dict[str, str]:
    """Spark's Kafka source options of the reader: its brokers, its login (passed as options, so in no
    process's command line) and its consumer groups' prefix."""
    options = {"kafka.bootstrap.servers": settings.kafka_bootstrap, "groupIdPrefix": f"{GROUP_PREFIX}spark"}
    found = identity(settings, READER)
    if found:
        options |= {
            "kafka.security.protocol": PROTOCOL,
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(authority(settings)),
            "kafka.sasl.mechanism": MECHANISM,
            "kafka.sasl.jaas.config": jaas(*found),
        }
    return options
