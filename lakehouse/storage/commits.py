"""How Spark commits to s3a:// tables: safely beside other drivers and beside delta-rs
(docs/operations.md, "Object storage").

A Delta commit is the file ``_delta_log/N.json``, written only if absent. Delta's default log store
for S3, ``S3SingleDriverLogStore``, checks for the file with a lock inside its own JVM and then
writes it: two drivers can both find version N free, and the second PUT replaces the first commit.
The platform's jobs are several drivers, and half their commits are delta-rs's (the stream's MERGE
and pane log, small quarantine and batch writes, the ``ops`` rows), which commits with S3's
conditional write: a PUT with ``If-None-Match: *`` that the store refuses when N.json exists.

So by default (``conditional``) Spark commits the same way, through ``S3ConditionalLogStore``
(lakehouse/storage/commits_java): whatever the writer, one PUT of N.json wins and the others retry
at N+1. The choices beside it:

- ``dynamodb``: Delta's ``S3DynamoDBLogStore`` (vendored from Delta 4.4.0, same folder), which
  claims N in a DynamoDB table and then copies the commit into place. It orders Spark drivers that
  all use it (other clusters' jobs sharing the tables, say) but not delta-rs, which does not read
  the table; a session refuses to start without the table's name.
- ``single-driver``: Delta's default, an opt-in for a deployment where one writer writes each table.
"""

from __future__ import annotations

from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import PROJECT_ROOT, Settings
from lakehouse.storage.object_store import S3A_JARS
from lakehouse.vocabulary import S3Commits

CONDITIONAL_LOG_STORE = "lakehouse.storage.S3ConditionalLogStore"
LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
SINGLE_DRIVER_LOG_STORE = "io.delta.storage.S3SingleDriverLogStore"
# Session settings S3DynamoDBLogStore reads (its SPARK_CONF_PREFIX; Delta copies a session's
# settings into the Hadoop configuration it hands the log store).
PREFIX = "spark.io.delta.storage.S3DynamoDBLogStore"
CREDENTIALS_PROVIDER = "lakehouse.storage.S3aKeysCredentialsProvider"
SOURCES = PROJECT_ROOT / "lakehouse" / "storage" / "commits_java"
CONDITIONAL_SOURCE = SOURCES / "lakehouse" / "storage" / "S3ConditionalLogStore.java"
DELTA_STORAGE = "io.delta:delta-storage:4.4.0"
HADOOP_AWS = S3A_JARS[0]
# The AWS SDK v1 DynamoDB client the vendored log store is written against, and what its core needs
# at run time that pyspark's JARs lack (httpclient, httpcore, joda-time, jackson-databind and
# commons-logging ship with pyspark or Delta). Loaded as ``local:`` JARs, as object_store.S3A_JARS.
SDK_JARS = (
    "com.amazonaws:aws-java-sdk-dynamodb:1.12.780",
    "com.amazonaws:aws-java-sdk-core:1.12.780",
    "com.amazonaws:jmespath-java:1.12.780",
    "software.amazon.ion:ion-java:1.0.2",
    "com.fasterxml.jackson.dataformat:jackson-dataformat-cbor:2.21.2",
)


def commits_jar(mode: S3Commits) -> str:
    """The log store of a multi-writer ``mode``, compiled once into .cache/: the conditional store
    against Spark, Delta's storage API and hadoop-aws alone; the vendored DynamoDB store and the
    platform's credentials provider against the AWS SDK v1 too, fetched only for that mode."""
    from pyspark.find_spark_home import _find_spark_home

    from lakehouse.storage.java import compiled_jar, maven_central_jar

    classpath = [
        str(Path(_find_spark_home()) / "jars" / "*"),
        maven_central_jar(DELTA_STORAGE),
        maven_central_jar(HADOOP_AWS),  # the conditional store's S3A exception
    ]
    if mode == S3Commits.CONDITIONAL:
        sources = [CONDITIONAL_SOURCE]
    else:
        sources = sorted(source for source in SOURCES.rglob("*.java") if source != CONDITIONAL_SOURCE)
        classpath += [maven_central_jar(coordinates) for coordinates in SDK_JARS[:2]]
    return compiled_jar(sources, classpath, PROJECT_ROOT / ".cache" / "jvm" / f"lakehouse-s3-{mode}.jar")


def session_jars(settings: Settings) -> list[str]:
    """The JARs a session with an S3 endpoint loads for its commits (none for single-driver)."""
    if not settings.s3_endpoint or settings.s3_commits == S3Commits.SINGLE_DRIVER:
        return []
    if settings.s3_commits == S3Commits.CONDITIONAL:
        return [commits_jar(S3Commits.CONDITIONAL)]
    from lakehouse.storage.java import maven_central_jar

    jars = (f"local:{maven_central_jar(coordinates)}" for coordinates in SDK_JARS)
    return [commits_jar(S3Commits.DYNAMODB), *jars]


def check(settings: Settings) -> None:
    """Refuse a session that would claim its commits in a DynamoDB table it is not told of."""
    if settings.s3_endpoint and settings.s3_commits == S3Commits.DYNAMODB and not settings.s3_commit_table:
        raise LakehouseError(
            "LAKEHOUSE_S3_COMMITS=dynamodb claims Spark's commits in a DynamoDB table: set LAKEHOUSE_S3_COMMIT_TABLE "
            "(and LAKEHOUSE_S3_COMMIT_ENDPOINT for a server other than AWS's: `lakehouse s3 start` runs one), "
            "or leave LAKEHOUSE_S3_COMMITS unset to commit with conditional writes"
        )


def spark_confs(settings: Settings, region: str) -> dict[str, str]:
    """The session settings of the settings' log store for s3a:// tables.

    Args:
        settings: the commit table, its endpoint, and the opt-in.
        region: the region of the DynamoDB table (the S3 endpoint's).
    """
    check(settings)
    if settings.s3_commits == S3Commits.SINGLE_DRIVER:
        return {"spark.delta.logStore.s3a.impl": SINGLE_DRIVER_LOG_STORE}
    # VACUUM records its start and end as commits where the store takes several writers; Delta
    # leaves that off for s3a:// unless told, having only its single-driver store in mind.
    vacuum_logged = {"spark.databricks.delta.vacuum.logging.enabled": "true"}
    if settings.s3_commits == S3Commits.CONDITIONAL:
        return {"spark.delta.logStore.s3a.impl": CONDITIONAL_LOG_STORE, **vacuum_logged}
    confs = {
        **vacuum_logged,
        "spark.delta.logStore.s3a.impl": LOG_STORE,
        f"{PREFIX}.ddb.tableName": settings.s3_commit_table,
        f"{PREFIX}.ddb.region": region,
        f"{PREFIX}.credentials.provider": CREDENTIALS_PROVIDER,
    }
    if settings.s3_commit_endpoint:
        confs[f"{PREFIX}.ddb.endpoint"] = settings.s3_commit_endpoint
    return confs


def main() -> None:
    """``python -m lakehouse.storage.commits``: compile both multi-writer log stores and fetch the
    SDK's JARs now (a Docker image's build)."""
    from lakehouse.storage.java import maven_central_jar

    for mode in (S3Commits.CONDITIONAL, S3Commits.DYNAMODB):
        print(commits_jar(mode))
    for coordinates in SDK_JARS:
        print(maven_central_jar(coordinates))


if __name__ == "__main__":
    main()
