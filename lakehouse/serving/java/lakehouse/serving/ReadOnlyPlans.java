package lakehouse.serving;

import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PlanExpression;
import org.apache.spark.sql.catalyst.expressions.UserDefinedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.DeserializeToObject;
import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.collection.Iterator;

/**
 * What a read-only session may run: an allow-list of plan nodes and expressions that only read.
 *
 * <p>A plan passes when its root describes (SHOW, DESCRIBE, EXPLAIN, USE: what they name is never
 * run) tables of the lakehouse, or when every node is a known query operator over the lakehouse's
 * Delta tables ({@link LakehouseTables}) and every expression is one of Spark's built-in functions.
 * Anything else is refused: a command (it changes data, a schema or the session), a node or
 * expression that runs code (script transformation, Python, Scala or Java functions, reflection), a
 * streaming source, a file that is not a Delta table, a Delta table the lakehouse does not hold, and
 * whatever a later Spark or Delta adds, until someone adds it here knowing it only reads.
 */
final class ReadOnlyPlans {
  private ReadOnlyPlans() {}

  private static final String DELTA = "org.apache.spark.sql.delta.";
  private static final String READS = "SQL here only reads (SELECT, SHOW, DESCRIBE, EXPLAIN, USE)";

  /** Commands that only describe what exists (and USE), parsed or analysed, and the names they resolve, by simple class name. */
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
          "DescribeQueryCommand",
          "DescribeRelation",
          "DescribeTableCommand",
          "ExplainCommand",
          "SetCatalogAndNamespace", // USE: which schema unqualified names mean, for this session only
          "ShowCatalogs",
          "ShowCatalogsCommand",
          "ShowColumns",
          "ShowColumnsCommand",
          "ShowCreateTable",
          "ShowCreateTableCommand",
          "ShowCurrentNamespace",
          "ShowCurrentNamespaceCommand",
          "ShowDeltaTableColumnsCommand",
          "ShowFunctions",
          "ShowFunctionsCommand",
          "ShowNamespaces",
          "ShowNamespacesCommand",
          "ShowPartitions",
          "ShowPartitionsCommand",
          "ShowDeltaPartitionsCommand",
          "ShowTableExtended",
          "ShowTablesExtended",
          "ShowTableProperties",
          "ShowTablePropertiesCommand",
          "ShowTables",
          "ShowTablesCommand",
          "ShowViews",
          "ShowViewsCommand",
          // What a catalog call (Connect's spark.catalog.getTable, listTables ...) resolves a name to.
          "ResolvedIdentifier",
          "ResolvedNamespace",
          "ResolvedNonPersistentFunc",
          "ResolvedPersistentFunc",
          "ResolvedPersistentView",
          "ResolvedTable",
          "ResolvedTempView");

  /** Query operators of an analysed plan that only read their children, by class. */
  static final Set<String> READING_NODES =
      Stream.concat(
              Stream.of(
                      "Aggregate", "CommandResult", "CTERelationDef", "CTERelationRef", "Deduplicate",
                      "Distinct", "Except", "Expand", "Filter", "Generate", "GlobalLimit", "Intersect",
                      "Join", "LateralJoin", "LocalLimit", "LocalRelation", "Offset", "OneRowRelation",
                      "Project", "Range", "RebalancePartitions", "Repartition", "RepartitionByExpression",
                      "ResolvedHint", "Sample", "Sort", "SubqueryAlias", "Tail", "Union", "UnionLoop",
                      "UnionLoopRef", "View", "Window", "WithCTE")
                  .map(name -> "org.apache.spark.sql.catalyst.plans.logical." + name),
              // A |> step of SQL's pipe syntax, around the operator it names.
              Stream.of("org.apache.spark.sql.catalyst.expressions.PipeOperator"))
          .collect(Collectors.toUnmodifiableSet());

  /** Packages of Spark's built-in expressions (the objects package, which invokes methods, is not). */
  static final Set<String> BUILT_IN_EXPRESSIONS =
      Set.of(
          "org.apache.spark.sql.catalyst.expressions",
          "org.apache.spark.sql.catalyst.expressions.aggregate",
          "org.apache.spark.sql.catalyst.expressions.json",
          "org.apache.spark.sql.catalyst.expressions.variant",
          "org.apache.spark.sql.catalyst.expressions.xml");

  /** Why a node that runs code is refused, for the message. */
  static final Map<String, String> RUNS_CODE =
      Map.of(
          "ScriptTransformation", "runs a program on the server (TRANSFORM ... USING)",
          "MapInPandas", "runs a client's Python on the server",
          "MapInArrow", "runs a client's Python on the server",
          "FlatMapGroupsInPandas", "runs a client's Python on the server",
          "FlatMapCoGroupsInPandas", "runs a client's Python on the server",
          "MapPartitions", "runs a client's code on the server");

  /** Throws unless the analysed plan only reads, and only the lakehouse's tables. */
  static void check(SparkSession session, LogicalPlan plan) {
    if (builtByDelta()) {
      return;
    }
    if (describes(plan)) {
      // What it describes (EXPLAIN DELETE ..., say) is never run; the tables it names are read.
      new LakehouseTables(session).checkDescribed(plan);
      return;
    }
    if (plan instanceof DeserializeToObject rows) {
      // Spark's own decoding of a result into rows (Dataset.collect), around a plan judged already.
      check(session, rows.child());
      return;
    }
    if (plan.isStreaming()) {
      throw refused("a streaming query runs on the server and writes to a sink, and " + READS);
    }
    visitPlan(plan, new LakehouseTables(session));
  }

  /**
   * Whether Delta's own code is analysing this plan: the queries it runs to read a table's log (JSON
   * and Parquet files, typed Datasets) while the analyser resolves the client's statement. Nothing
   * of the client's is in them, and the client's statement itself is judged once resolved.
   */
  private static boolean builtByDelta() {
    return StackWalker.getInstance()
        .walk(frames -> frames.anyMatch(frame -> frame.getClassName().startsWith(DELTA)));
  }

  static boolean describes(LogicalPlan plan) {
    return DESCRIBING_COMMANDS.contains(plan.getClass().getSimpleName());
  }

  /**
   * Throws when a parsed statement is a change, before the analyser resolves what it names: a change
   * to a view is then refused as one to a table is, and not with the view's own error.
   */
  static void checkParsed(LogicalPlan plan) {
    if ((plan instanceof Command && !describes(plan)) || plan instanceof InsertIntoStatement) {
      throw changes(plan.getClass().getSimpleName());
    }
  }

  private static void visitPlan(LogicalPlan node, LakehouseTables tables) {
    String name = node.getClass().getSimpleName();
    if (node instanceof LogicalRelation relation) {
      checkFiles(relation, tables);
    } else if (node instanceof DataSourceV2Relation relation) {
      checkTable(relation, tables);
    } else if (node instanceof Command || node instanceof InsertIntoStatement) {
      throw changes(name);
    } else if (RUNS_CODE.containsKey(name)) {
      throw refused(name + " " + RUNS_CODE.get(name) + ", and " + READS);
    } else if (!READING_NODES.contains(node.getClass().getName())) {
      throw refused(name + " is not known to only read, and " + READS);
    }
    for (Iterator<Expression> it = node.expressions().iterator(); it.hasNext(); ) {
      visitExpression(it.next(), tables);
    }
    for (Iterator<LogicalPlan> it = node.children().iterator(); it.hasNext(); ) {
      visitPlan(it.next(), tables);
    }
  }

  private static void visitExpression(Expression expression, LakehouseTables tables) {
    String name = expression.getClass().getSimpleName();
    if (expression instanceof CallMethodViaReflection || name.equals("TryReflect")) {
      throw refused("reflect/java_method call JVM methods, and " + READS);
    }
    if (expression instanceof UserDefinedExpression) {
      throw refused(name + " runs a client's function on the server, and " + READS);
    }
    if (expression instanceof PlanExpression<?> subquery) {
      if (subquery.plan() instanceof LogicalPlan plan) {
        visitPlan(plan, tables);
      }
    } else if (!BUILT_IN_EXPRESSIONS.contains(expression.getClass().getPackageName())) {
      throw refused(name + " is not one of Spark's built-in functions, and " + READS);
    }
    for (Iterator<Expression> it = expression.children().iterator(); it.hasNext(); ) {
      visitExpression(it.next(), tables);
    }
  }

  /** Files are read only as Delta tables, and only the lakehouse's: by name, or by a table's location. */
  private static void checkFiles(LogicalRelation relation, LakehouseTables tables) {
    if (QueryLog.readsLog(relation)) {
      QueryLog.checkReader(tables.session());
      return;
    }
    Object source = relation.relation();
    if (source instanceof HadoopFsRelation files) {
      source = files.fileFormat();
    }
    if (!isDelta(source)) {
      throw refused(
          "reading " + source.getClass().getSimpleName() + " files reads the server's own files;"
              + " SQL here reads the lakehouse's Delta tables");
    }
    tables.check(relation);
  }

  private static void checkTable(DataSourceV2Relation relation, LakehouseTables tables) {
    if (!isDelta(relation.table())) {
      throw refused(relation.table().getClass().getSimpleName() + " is not a Delta table of the lakehouse");
    }
    tables.check(relation.table());
  }

  static boolean isDelta(Object source) {
    return source.getClass().getName().startsWith(DELTA);
  }

  static ReadOnlyExtension.ReadOnlyViolation changes(String name) {
    return refused(name + " changes data, schema or session state, and " + READS);
  }

  static ReadOnlyExtension.ReadOnlyViolation refused(String reason) {
    return new ReadOnlyExtension.ReadOnlyViolation(reason);
  }
}
