package lakehouse.serving;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PlanExpression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.Function1;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Read-only SQL for analysts and BI tools, for every way in: the Thrift (JDBC/ODBC) server, Spark
 * Connect and the embedded `lakehouse sql`. A check rule sees each statement's analysed plan before
 * anything runs, in every session of the JVM.
 *
 * <p>Spark carries out every change of data, schema or session as a command (INSERT and MERGE
 * resolve to write commands; Delta's OPTIMIZE, VACUUM and RESTORE are commands too), so the rule is
 * an allow-list: a plan is refused when it holds any command other than those that only describe.
 * A verb Spark or Delta adds later is refused until someone decides it only reads. Java reflection
 * (reflect, java_method, try_reflect) is refused too: it calls any static method of the JVM.
 *
 * <p>Which sessions may write: with {@code spark.lakehouse.readOnly=true} in the JVM's Spark
 * configuration (the service), every session is read-only except those the platform's own driver
 * code marks writable through {@link #setWritable}, and the Connect sessions of the platform's jobs,
 * which present the service's write token in their {@code spark.lakehouse.writeToken} setting.
 * Sessions a client opens are new sessions, so they read only. A client's SET cannot change this:
 * the flag is read from the SparkContext's configuration, fixed at start, and the marks and the
 * token live in this class, out of SQL's reach (SET itself is refused, and so is reflection).
 */
public final class ReadOnlyExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  public static final String READ_ONLY = "spark.lakehouse.readOnly";

  /** Commands that only describe what exists (and USE), by simple class name. */
  static final Set<String> DESCRIBING_COMMANDS =
      Set.of(
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
          "SetCatalogAndNamespace", // USE: which schema unqualified names mean, for this session only
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
          "ShowViewsCommand");

  /** The session setting by which a platform job's Connect session presents the write token. */
  public static final String WRITE_TOKEN_CONF = "spark.lakehouse.writeToken";

  private static final Map<SparkSession, Boolean> WRITABLE =
      Collections.synchronizedMap(new WeakHashMap<>());
  private static volatile byte[] writeToken;

  /** Let this session write (true) or make it read-only (false), whatever the JVM's default. */
  public static void setWritable(SparkSession session, boolean writable) {
    WRITABLE.put(session, writable);
  }

  /** The secret a session must present to write in a read-only JVM (the platform's jobs). */
  public static void setWriteToken(String token) {
    writeToken = token.getBytes(StandardCharsets.UTF_8);
  }

  static boolean readOnly(SparkSession session) {
    Boolean writable = WRITABLE.get(session);
    if (writable != null) {
      return !writable;
    }
    if (!session.sparkContext().getConf().getBoolean(READ_ONLY, false)) {
      return false;
    }
    byte[] expected = writeToken;
    byte[] offered = session.conf().get(WRITE_TOKEN_CONF, "").getBytes(StandardCharsets.UTF_8);
    return expected == null || !MessageDigest.isEqual(expected, offered);
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(
        new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
          @Override
          public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
            return new AbstractFunction1<LogicalPlan, BoxedUnit>() {
              @Override
              public BoxedUnit apply(LogicalPlan plan) {
                if (readOnly(session)) {
                  check(plan);
                }
                return BoxedUnit.UNIT;
              }
            };
          }
        });
    return BoxedUnit.UNIT;
  }

  /** Throws unless the analysed plan only reads. */
  public static void check(LogicalPlan plan) {
    if (DESCRIBING_COMMANDS.contains(plan.getClass().getSimpleName())) {
      return; // what it describes (EXPLAIN DELETE ..., say) is never run
    }
    visitPlan(plan);
  }

  private static void visitPlan(LogicalPlan node) {
    String name = node.getClass().getSimpleName();
    if (node instanceof Command && !DESCRIBING_COMMANDS.contains(name)) {
      throw new ReadOnlyViolation(
          name + " changes data, schema or session state, and SQL here only reads"
              + " (SELECT, SHOW, DESCRIBE, EXPLAIN, USE)");
    }
    for (Iterator<Expression> it = node.expressions().iterator(); it.hasNext(); ) {
      visitExpression(it.next());
    }
    for (Iterator<LogicalPlan> it = node.children().iterator(); it.hasNext(); ) {
      visitPlan(it.next());
    }
  }

  private static void visitExpression(Expression expression) {
    if (expression instanceof CallMethodViaReflection) {
      throw new ReadOnlyViolation("reflect/java_method call JVM methods, and SQL here only reads");
    }
    if (expression instanceof PlanExpression<?> subquery
        && subquery.plan() instanceof LogicalPlan plan) {
      visitPlan(plan);
    }
    for (Iterator<Expression> it = expression.children().iterator(); it.hasNext(); ) {
      visitExpression(it.next());
    }
  }

  /** The error every client sees; its message starts with "read-only:". */
  public static final class ReadOnlyViolation extends SecurityException {
    ReadOnlyViolation(String reason) {
      super("read-only: " + reason);
    }
  }
}
