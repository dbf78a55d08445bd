"""Run SQL over the lakehouse's tables and views, and print results as a table, CSV or JSON."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
from datetime import date, datetime
from decimal import Decimal

from pyspark.sql import SparkSession

from lakehouse.errors import LakehouseError
from lakehouse.serving.read_only import reading_only, refusal
from lakehouse.settings import Settings
from lakehouse.storage.catalog import register_tables
from lakehouse.storage.spark import is_remote
from lakehouse.vocabulary import OutputFormat, choices


def _text(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)


def json_value(value):
    """A value as ``--format json`` writes it."""
    if isinstance(value, Decimal):
        return str(value)  # exact to the cent; a float would not be
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return value


def format_rows(columns: list[str], rows: list[tuple], output: str, truncated: bool = False) -> str:
    """The rows as text: an aligned table, CSV or JSON.

    Args:
        columns: the column names.
        rows: the rows, as tuples.
        output: ``table``, ``csv`` or ``json``.
        truncated: the rows were cut at the row limit (the table says so).
    """
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if v is None else _text(v) for v in row] for row in rows])
        return buffer.getvalue()
    if output == "json":
        records = [{c: json_value(v) for c, v in zip(columns, row, strict=True)} for row in rows]
        return json.dumps(records, indent=1) + "\n"
    cells = [[_text(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    numeric = [
        bool(rows) and all(isinstance(r[i], (int, float, Decimal)) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]

    def line(values):
        padded = (v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric, strict=True))
        return " | ".join(padded).rstrip()

    out = [line(columns), "-+-".join("-" * w for w in widths)] + [line(row) for row in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', more not shown' if truncated else ''})")
    return "\n".join(out) + "\n"


def run_sql(
    spark: SparkSession, settings: Settings, query: str, output: str = "table", max_rows: int | None = 1000
) -> str:
    """Run one SQL statement over the registered tables and format its rows. Statements that would
    change a table, a schema or the session are refused before they run (lakehouse.serving.read_only).

    Args:
        spark: an embedded session, or a Spark Connect session of the Spark service (which keeps
            the tables registered and refuses changes on its own).
        settings: where the log, the tables and the checkpoints live.
        query: one SQL statement.
        output: ``table``, ``csv`` or ``json``.
        max_rows: the most rows returned (None: all).
    """
    if output not in choices(OutputFormat):
        raise LakehouseError(f"unknown format {output!r}: use one of {', '.join(OutputFormat)}")
    embedded = not is_remote(spark)
    if embedded:
        register_tables(spark, settings)
    with reading_only(spark) if embedded else contextlib.nullcontext():
        try:
            frame = spark.sql(query)
            limited = frame.limit(max_rows + 1) if max_rows is not None else frame
            rows = [tuple(row) for row in limited.collect()]
            columns = frame.columns
        except Exception as error:
            raise _sql_error(error) from None
    truncated = max_rows is not None and len(rows) > max_rows
    return format_rows(columns, rows[:max_rows] if truncated else rows, output, truncated)


def _sql_error(error: Exception) -> Exception:
    """A one-line ``LakehouseError`` for a refused or failed statement; anything else as it was."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    refused = refusal(error)
    if refused is not None:
        return refused
    unanswered = _unanswered(error)
    if unanswered is not None:
        return unanswered
    if isinstance(error, (PySparkException, Py4JJavaError)):  # analysis, parse and runtime errors alike
        text = str(error).strip()
        return LakehouseError(f"SQL error: {text.splitlines()[0] if text else type(error).__name__}")
    return error


def _unanswered(error: Exception) -> LakehouseError | None:
    """The one line for a Spark service that did not answer (gRPC's UNAVAILABLE: down, restarting,
    or unreachable), naming the address the client tried; None for any other error."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    if not isinstance(error, SparkConnectGrpcException) or error.getGrpcStatusCode().name != "UNAVAILABLE":
        return None
    details = re.search(r'details = "([^"]*)"', str(error))
    said = details.group(1) if details else str(error).strip().splitlines()[0]
    return LakehouseError(f"the Spark service does not answer ({said}): it is down or restarting; try again shortly")
