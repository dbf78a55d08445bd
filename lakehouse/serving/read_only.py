"""Read-only SQL: analysts and BI tools may read every table and view, and change none.

A statement is checked before it runs, on Spark's own analysis of it (parsed and resolved, never
executed). Spark carries out every change of data, schema or session as a *command* (INSERT and
MERGE resolve to write commands, Delta's OPTIMIZE, VACUUM and RESTORE are commands too), so the rule
is an allow-list, not a list of verbs to catch: a statement is refused when its plan holds any command
other than those that only describe (SHOW, DESCRIBE, EXPLAIN, and USE). A verb Spark or Delta adds
later is refused until someone decides it only reads. Delta's own statements are also refused as
parsed, before analysis, which turns some of them into nothing when they have nothing to do.

Java reflection (``reflect``, ``java_method``, ``try_reflect``) is refused too: it calls any static
method of the JVM, a way to change anything from a SELECT.
"""

from __future__ import annotations

import json

from pyspark.sql import SparkSession

from lakehouse.errors import LakehouseError

# Commands that only describe what exists (and USE). Simple class names, as Spark and Delta name them.
DESCRIBING_COMMANDS = frozenset(
    {
        "DescribeColumn",
        "DescribeColumnCommand",
        "DescribeDeltaDetailCommand",
        "DescribeDeltaHistory",
        "DescribeDeltaHistoryCommand",
        "DescribeFunction",
        "DescribeFunctionCommand",
        "DescribeNamespace",
        "DescribeRelation",
        "DescribeTableCommand",
        "ExplainCommand",
        "SetCatalogAndNamespace",  # USE: which schema unqualified names mean, for this session only
        "ShowCatalogs",
        "ShowColumns",
        "ShowColumnsCommand",
        "ShowCreateTable",
        "ShowCreateTableCommand",
        "ShowFunctions",
        "ShowFunctionsCommand",
        "ShowNamespaces",
        "ShowPartitions",
        "ShowTableExtended",
        "ShowTableProperties",
        "ShowTablePropertiesCommand",
        "ShowTables",
        "ShowTablesCommand",
        "ShowViews",
        "ShowViewsCommand",
    }
)
# The expression that calls a JVM method by name (reflect, java_method, try_reflect).
REFLECTION = "org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection"
COMMAND = "org.apache.spark.sql.catalyst.plans.logical.Command"
DELTA_PACKAGES = ("org.apache.spark.sql.delta.", "io.delta.")


def refuse_changes(spark: SparkSession, statement: str) -> None:
    """Raise a one-line ``LakehouseError`` unless ``statement`` only reads; run nothing either way.

    Args:
        spark: the session whose parser, catalog and analyzer judge the statement.
        statement: one SQL statement.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        parsed = spark._jsparkSession.sessionState().sqlParser().parsePlan(statement)
        if _is_written_statement(parsed):
            # Refused as written: Delta resolves some of its statements to nothing when there is
            # nothing to do (RESTORE to the current version), which the analysed plan would let pass.
            _refuse(parsed.getClass().getSimpleName())
        plan = _analyzed(spark, parsed)
    except (PySparkException, Py4JJavaError) as error:
        raise LakehouseError(f"SQL error: {_first_line(error)}") from None
    if plan.getClass().getSimpleName() in DESCRIBING_COMMANDS:
        return  # what it describes (EXPLAIN DELETE ..., say) is never run
    changing = _first_command(plan, spark.sparkContext._jvm.java.lang.Class.forName(COMMAND))
    if changing is not None:
        _refuse(changing)
    if REFLECTION in _classes(plan):
        raise LakehouseError("read-only: reflect/java_method call JVM methods, and SQL here only reads")


def _refuse(command: str) -> None:
    raise LakehouseError(
        f"read-only: {command} changes data, schema or session state, and SQL here only reads "
        "(SELECT, SHOW, DESCRIBE, EXPLAIN)"
    )


def _is_written_statement(parsed) -> bool:
    """A parsed statement that writes, whatever it resolves to: Spark's and Delta's parsers name such
    statements ``...Statement`` (INSERT, RESTORE, CLONE), and Delta's commands live in its own
    packages (OPTIMIZE, VACUUM ...). A query parses to Spark's own operators, Delta tables or not."""
    name, simple = parsed.getClass().getName(), parsed.getClass().getSimpleName()
    if simple in DESCRIBING_COMMANDS:
        return False
    return simple.endswith("Statement") or name.startswith(DELTA_PACKAGES)


def _analyzed(spark: SparkSession, parsed):
    """Spark's resolved plan of a parsed statement, with no command executed."""
    skip = spark.sparkContext._jvm.org.apache.spark.sql.execution.CommandExecutionMode.SKIP()
    return spark._jsparkSession.sessionState().executePlan(parsed, skip).analyzed()


def _first_command(plan, command_type) -> str | None:
    """The simple class name of the first command in ``plan`` (depth first) that may change something."""
    pending = [plan]
    while pending:
        node = pending.pop()
        name = node.getClass().getSimpleName()
        if command_type.isInstance(node) and name not in DESCRIBING_COMMANDS:
            return name
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return None


def _classes(plan) -> set[str]:
    """Every class named in the plan's JSON form: its operators and their expressions."""
    found: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("class"), str):
                found.add(value["class"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(plan.toJSON()))
    return found


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
