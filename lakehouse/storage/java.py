"""Java for the platform's JVMs: the check that one is installed, and single JARs from Maven Central
(no pyspark here: the Airflow-side code and the service scripts use these too)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import PROJECT_ROOT

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


def maven_central_jar(coordinates: str) -> str:
    """One JAR (``group:artifact:version[:classifier]``, no dependencies) from Maven Central, checked
    against the SHA-1 Central publishes, cached in .cache/jars after the first download."""
    group, artifact, version, *classifier = coordinates.split(":")
    name = "-".join([artifact, version, *classifier]) + ".jar"
    target = PROJECT_ROOT / ".cache" / "jars" / name
    if target.is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # One download at a time per JAR: processes starting together (test workers, say) wait for it.
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            _download(f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{name}", target, coordinates)
    return str(target)


def _download(url: str, target: Path, coordinates: str) -> None:
    """The file at ``url`` into ``target``, streamed to disk (the AWS SDK's bundle is 641 MB) and
    checked against the SHA-1 Maven Central publishes beside it."""
    import urllib.request

    partial = target.with_suffix(f".{os.getpid()}.partial")
    digest = hashlib.sha1()
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        with urllib.request.urlopen(f"{url}.sha1", timeout=60) as response:
            published = response.read().decode().split()[0]
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise LakehouseError(f"could not download {coordinates} from Maven Central ({url}): {error}") from None
    if digest.hexdigest() != published:
        partial.unlink(missing_ok=True)
        raise LakehouseError(f"{url} does not match the SHA-1 Maven Central publishes for it")
    os.replace(partial, target)


def compiled_jar(sources: list[Path], classpath: list[str], target: Path) -> str:
    """``target``, the classes of the Java ``sources`` compiled against ``classpath``; compiled
    again whenever a source file is newer than it. The JAR is written beside ``target`` and
    renamed: a JVM starting meanwhile never reads half a JAR.

    Args:
        sources: the .java files.
        classpath: JARs or ``folder/*`` entries the sources compile against.
        target: the JAR's path in the ignored .cache/.
    """
    if target.is_file() and all(source.stat().st_mtime <= target.stat().st_mtime for source in sources):
        return str(target)
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar:
        raise LakehouseError(f"a JDK 17 (javac and jar) is required to compile the platform's {target.name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = f"{target}.{os.getpid()}.partial"
    with tempfile.TemporaryDirectory(prefix="lakehouse-javac-") as classes:
        compile_and_pack = (
            [javac, "--release", "17", "-nowarn", "-cp", os.pathsep.join(classpath), "-d", classes, *map(str, sources)],
            [jar, "cf", partial, "-C", classes, "."],
        )
        for command in compile_and_pack:
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise LakehouseError(f"{Path(command[0]).name} failed: {(done.stderr or done.stdout).strip()}")
    os.replace(partial, target)
    return str(target)


def java_executable() -> str | None:
    """The ``java`` Spark's launcher starts: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")


def check_java() -> None:
    java = java_executable()
    if not java or not Path(java).exists():
        raise LakehouseError(
            "Java 17 is required to run Spark but no `java` was found (install a JDK 17 or set JAVA_HOME)"
        )
    try:
        subprocess.run([java, "-version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        raise LakehouseError(f"`{java} -version` failed: {error}") from error
