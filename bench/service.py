"""One Spark service for the suites that use it (orchestration, sql_latency): started on the data
set's home, on free ports, by the first suite that asks, and stopped when the run ends (the analysts
suite starts one of its own on the home it streams to). A start costs a JVM's start-up and the
tables' registration, which no suite times."""

from __future__ import annotations

import time

from bench.data import DataSet, settings_for
from lakehouse.services import spark_service as service
from lakehouse.settings import Settings
from lakehouse.vocabulary import Role

BENCH_USER = "bench"


class SharedService:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.started_s: float | None = None
        self._url: str | None = None
        self._password: str | None = None

    @classmethod
    def on(cls, data: DataSet) -> SharedService:
        """The service of a data set's home."""
        return cls(data.settings(LAKEHOUSE_CONNECT_PORT="0", LAKEHOUSE_THRIFT_PORT="0"))

    @classmethod
    def on_home(cls, home, **env: str) -> SharedService:
        """The service of a bench's own home."""
        return cls(settings_for(home, LAKEHOUSE_CONNECT_PORT="0", LAKEHOUSE_THRIFT_PORT="0", **env))

    def connect_url(self) -> str:
        """The service's ``sc://`` URL, starting it the first time."""
        if self._url is None:
            began = time.perf_counter()
            self._url = service.start(self.settings)["connect"]
            self.started_s = round(time.perf_counter() - began, 2)
        return self._url

    def login(self) -> dict[str, str]:
        """The environment of a client logged in as the bench's analyst, made at the first ask (a
        home kept from an earlier run gets a new password)."""
        from lakehouse.serving import users

        if self._password is None:
            path = users.users_file(self.settings)
            if BENCH_USER in users.read_users(path):
                users.remove_user(path, BENCH_USER)
            self._password = users.add_user(path, BENCH_USER, Role.ANALYST)
        return {"LAKEHOUSE_SQL_USER": BENCH_USER, "LAKEHOUSE_SQL_PASSWORD": self._password}

    def jdbc_url(self) -> str:
        """The service's ``jdbc:hive2://`` URL (it is started by ``connect_url``)."""
        self.connect_url()
        return service.status(self.settings)["jdbc"]

    def stop(self) -> None:
        if self._url is not None:
            service.stop(self.settings)
            self._url = None
