"""The services' files, ports and routing, without starting them: plain Python, no JVM."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.services.process import claim_port, saved_port
from lakehouse.services.spark_service import ServiceState, connect_url, status
from lakehouse.serving.server import hive_site
from lakehouse.settings import Settings


def _settings(tmp_path, **env) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home"), **env})


def test_hive_site_carries_the_metastore_connection_with_its_characters_escaped(tmp_path):
    settings = _settings(
        tmp_path,
        LAKEHOUSE_METASTORE_URL="jdbc:postgresql://127.0.0.1:5432/metastore",
        LAKEHOUSE_METASTORE_USER="metastore",
        LAKEHOUSE_METASTORE_PASSWORD="a<b&c>'d\"",
    )
    root = ET.fromstring(hive_site(settings))
    properties = {p.findtext("name"): p.findtext("value") for p in root.iter("property")}

    assert properties["javax.jdo.option.ConnectionURL"] == "jdbc:postgresql://127.0.0.1:5432/metastore"
    assert properties["javax.jdo.option.ConnectionPassword"] == "a<b&c>'d\""
    assert properties["datanucleus.schema.autoCreateTables"] == "true"
    assert properties["datanucleus.schema.autoCreateConstraints"] == "false"


def test_sql_runs_embedded_when_no_service_is_up_or_the_route_says_so(tmp_path):
    assert connect_url(_settings(tmp_path)) is None
    assert connect_url(_settings(tmp_path, LAKEHOUSE_SQL_ROUTE="embedded")) is None
    assert connect_url(_settings(tmp_path, LAKEHOUSE_SQL_ROUTE="sc://db:15002")) == "sc://db:15002"


def test_a_state_file_left_by_a_dead_service_does_not_count_as_up(tmp_path):
    settings = _settings(tmp_path)
    files = ServiceState.of(settings)
    files.folder.mkdir(parents=True)
    (files.folder / "server.pid").write_text("999999999")
    files.write_ready(999999999, ["gold.toll_traffic"])

    assert status(settings) == {"up": False, "pid": None, "log": str(files.log)}
    assert connect_url(settings) is None


def test_a_service_keeps_the_port_it_was_set_up_on_and_refuses_another_or_a_taken_one(tmp_path):
    first = claim_port(tmp_path, None, "LAKEHOUSE_S3_PORT", "S3 server")
    assert saved_port(tmp_path) == first and claim_port(tmp_path, None, "LAKEHOUSE_S3_PORT", "S3 server") == first
    assert claim_port(tmp_path, first, "LAKEHOUSE_S3_PORT", "S3 server") == first
    with pytest.raises(
        LakehouseError, match=f"this home's S3 server was set up on port {first}: set LAKEHOUSE_S3_PORT={first}"
    ):
        claim_port(tmp_path, first + 1, "LAKEHOUSE_S3_PORT", "S3 server")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        with pytest.raises(LakehouseError, match=f"port {taken} is taken"):
            claim_port(tmp_path / "other", taken, "LAKEHOUSE_DYNAMODB_PORT", "DynamoDB server")
    assert saved_port(tmp_path / "other") is None
