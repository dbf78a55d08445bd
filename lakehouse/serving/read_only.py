"""Read-only SQL: analysts and BI tools may read every table and view, and change none.

The rule itself is a Spark check rule, ``lakehouse.serving.ReadOnlyExtension`` (its Java source is in
``java/`` beside this module): every session loads it, and it judges each statement's analysed plan
before anything runs, whichever way the statement came in: ``lakehouse sql``, the Thrift (JDBC/ODBC)
server or Spark Connect. It allows plans that only read or describe (SELECT, SHOW, DESCRIBE,
EXPLAIN, USE) the lakehouse's tables, and refuses any other command, Java reflection, and a Delta
table read by a path where the catalog holds none, with an error whose message starts with
``read-only:``. docs/design.md ("Serving") says which sessions may write.

This module turns that error into the CLI's one line, and marks the embedded ``lakehouse sql``
session read-only for the statement it runs.
"""

from __future__ import annotations

import contextlib
import re

from lakehouse.errors import LakehouseError

# A Connect client quotes the gate's refusal in its gRPC status: the message ends at the quote. A
# login the service refused (lakehouse.serving.LoginRefused) is told the same way.
REFUSAL = re.compile(r"(?:read-only|not authenticated): [^\n\"]*")


def refusal(error: BaseException) -> LakehouseError | None:
    """The one-line error for a statement the read-only rule refused, or a login the service refused;
    None for any other error."""
    found = REFUSAL.search(str(error))
    return LakehouseError(found.group(0).rstrip()) if found else None


@contextlib.contextmanager
def reading_only(spark):
    """The embedded session refuses every change while inside (it registers the tables before)."""
    extension = spark._jvm.lakehouse.serving.ReadOnlyExtension
    try:
        extension.setWritable(spark._jsparkSession, False)
    except TypeError:  # Py4J found no such class: the JAR is not on this session's class path
        raise LakehouseError("the read-only rule (lakehouse-extensions.jar) is not loaded in this session") from None
    try:
        yield
    finally:
        extension.setWritable(spark._jsparkSession, True)
