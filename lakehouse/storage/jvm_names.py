"""Java classes and static methods that PySpark looks up by name, resolved once per process.

PySpark reaches the JVM through py4j, and py4j resolves names on every use: ``F.col("x")`` asks the
JVM what ``functions`` is (a failed class lookup in each of PySpark's imported packages first, each
through every JAR on the class path), then whether ``col`` is a method of it, and only then calls it.
In one audit test that was 5,400 of the 17,800 round trips into the JVM (docs/design.md,
"Performance"). A class and its static methods do not change while the JVM runs, so the
session's view of the JVM keeps each answer the first time it gets one.
"""

from __future__ import annotations

from py4j.java_gateway import JavaClass, JavaMember, JVMView


def _kept(owner, name: str, found):
    """Keep ``found`` on ``owner`` when it is a class or a static method, which cannot change while
    the JVM runs; a static field's value may, and packages stay lazy: those are asked each time."""
    if isinstance(found, JavaClass):
        found.__class__ = _StaticsResolvedOnce
    if isinstance(found, JavaClass | JavaMember):
        owner.__dict__[name] = found
    return found


class _StaticsResolvedOnce(JavaClass):
    """A Java class whose static methods and nested classes are looked up once."""

    def __getattr__(self, name: str):
        return _kept(self, name, super().__getattr__(name))


class _ClassesResolvedOnce(JVMView):
    """The session's view of the JVM, keeping each class it resolved."""

    def __getattr__(self, name: str):
        return _kept(self, name, super().__getattr__(name))


def resolve_jvm_names_once(spark) -> None:
    """Make the JVM view of ``spark``'s gateway (every PySpark call's) keep what it resolves."""
    view = spark.sparkContext._jvm
    if type(view) is JVMView:
        view.__class__ = _ClassesResolvedOnce
