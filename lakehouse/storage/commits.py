"""How Spark commits to s3a:// tables: safely for several drivers at once (docs/operations.md,
"Object storage").

A Delta commit is the file ``_delta_log/N.json``, written only if absent. Delta's default log store
for S3, ``S3SingleDriverLogStore``, checks for the file with a lock inside its own JVM and then
writes it: two drivers can both find version N free, and the second PUT replaces the first commit.
So every session with an S3 endpoint commits through ``S3DynamoDBLogStore``, which claims N with
a conditional write to a DynamoDB table first (one claim wins) and only then copies the commit into
place. Its source is vendored in lakehouse/storage/dynamodb_java (Delta 4.4.0) and compiled here.

The only other choice is ``LAKEHOUSE_S3_COMMITS=single-driver``, an opt-in for a deployment where
one driver writes each table; without a commit table or that opt-in, a session refuses to start.
"""

from __future__ import annotations

from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import PROJECT_ROOT, Settings
from lakehouse.vocabulary import S3Commits

LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
SINGLE_DRIVER_LOG_STORE = "io.delta.storage.S3SingleDriverLogStore"
# Session settings S3DynamoDBLogStore reads (its SPARK_CONF_PREFIX; Delta copies a session's
# settings into the Hadoop configuration it hands the log store).
PREFIX = "spark.io.delta.storage.S3DynamoDBLogStore"
CREDENTIALS_PROVIDER = "lakehouse.storage.S3aKeysCredentialsProvider"
SOURCES = PROJECT_ROOT / "lakehouse" / "storage" / "dynamodb_java"
COMMITS_JAR = PROJECT_ROOT / ".cache" / "jvm" / "lakehouse-s3-commits.jar"
DELTA_STORAGE = "io.delta:delta-storage:4.4.0"
# The AWS SDK v1 DynamoDB client the log store is written against, and what its core needs at run
# time that pyspark's JARs lack (httpclient, httpcore, joda-time, jackson-databind and
# commons-logging ship with pyspark or Delta). Loaded as ``local:`` JARs, as object_store.S3A_JARS.
SDK_JARS = (
    "com.amazonaws:aws-java-sdk-dynamodb:1.12.780",
    "com.amazonaws:aws-java-sdk-core:1.12.780",
    "com.amazonaws:jmespath-java:1.12.780",
    "software.amazon.ion:ion-java:1.0.2",
    "com.fasterxml.jackson.dataformat:jackson-dataformat-cbor:2.21.2",
)


def commits_jar() -> str:
    """The vendored log store and the platform's credentials provider, compiled once into .cache/."""
    from pyspark.find_spark_home import _find_spark_home

    from lakehouse.storage.java import compiled_jar, maven_central_jar

    sources = sorted(SOURCES.rglob("*.java"))
    classpath = [
        str(Path(_find_spark_home()) / "jars" / "*"),
        maven_central_jar(DELTA_STORAGE),
        *(maven_central_jar(coordinates) for coordinates in SDK_JARS[:2]),
    ]
    return compiled_jar(sources, classpath, COMMITS_JAR)


def session_jars(settings: Settings) -> list[str]:
    """The JARs a session with an S3 endpoint loads for its commits (none for single-driver)."""
    if not settings.s3_endpoint or settings.s3_commits == S3Commits.SINGLE_DRIVER:
        return []
    from lakehouse.storage.java import maven_central_jar

    return [commits_jar(), *(f"local:{maven_central_jar(coordinates)}" for coordinates in SDK_JARS)]


def check(settings: Settings) -> None:
    """Refuse a session that could lose commits to s3a:// tables: an S3 endpoint with neither a
    commit table nor the single-driver opt-in."""
    if settings.s3_endpoint and settings.s3_commits == S3Commits.DYNAMODB and not settings.s3_commit_table:
        raise LakehouseError(
            "Spark commits to s3a:// tables need a DynamoDB table to order them: set LAKEHOUSE_S3_COMMIT_TABLE "
            "(and LAKEHOUSE_S3_COMMIT_ENDPOINT for a server other than AWS's: `lakehouse s3 start` runs one), "
            "or LAKEHOUSE_S3_COMMITS=single-driver if one driver alone writes each table"
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
    confs = {
        "spark.delta.logStore.s3a.impl": LOG_STORE,
        f"{PREFIX}.ddb.tableName": settings.s3_commit_table,
        f"{PREFIX}.ddb.region": region,
        f"{PREFIX}.credentials.provider": CREDENTIALS_PROVIDER,
    }
    if settings.s3_commit_endpoint:
        confs[f"{PREFIX}.ddb.endpoint"] = settings.s3_commit_endpoint
    return confs


def main() -> None:
    """``python -m lakehouse.storage.commits``: fetch the SDK's JARs and compile the log store now
    (a Docker image's build)."""
    from lakehouse.storage.java import maven_central_jar

    print(commits_jar())
    for coordinates in SDK_JARS:
        print(maven_central_jar(coordinates))


if __name__ == "__main__":
    main()
