package lakehouse.serving;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.collection.immutable.Seq;

/**
 * The session's SQL parser, refusing in a read-only session a statement that changes anything as
 * soon as it is parsed: before the analyser resolves what it names, so that a change to a view gets
 * the message a change to a table gets, and not the view's own error. Everything else is the
 * wrapped parser's (Delta's, then Spark's). The analysed plan is judged again by the check rule.
 */
final class ReadOnlyParser implements ParserInterface {
  private final SparkSession session;
  private final ParserInterface parser;

  ReadOnlyParser(SparkSession session, ParserInterface parser) {
    this.session = session;
    this.parser = parser;
  }

  private LogicalPlan judged(LogicalPlan plan) {
    if (ReadOnlyExtension.readOnly(session)) {
      ReadOnlyPlans.checkParsed(plan);
    }
    return plan;
  }

  @Override
  public LogicalPlan parsePlan(String sqlText) throws ParseException {
    return judged(parser.parsePlan(sqlText));
  }

  @Override
  public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext parameters) throws ParseException {
    return judged(parser.parsePlanWithParameters(sqlText, parameters));
  }

  @Override
  public LogicalPlan parseQuery(String sqlText) throws ParseException {
    return parser.parseQuery(sqlText);
  }

  @Override
  public Expression parseExpression(String sqlText) throws ParseException {
    return parser.parseExpression(sqlText);
  }

  @Override
  public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
    return parser.parseTableIdentifier(sqlText);
  }

  @Override
  public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
    return parser.parseFunctionIdentifier(sqlText);
  }

  @Override
  public Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
    return parser.parseMultipartIdentifier(sqlText);
  }

  @Override
  public StructType parseRoutineParam(String sqlText) throws ParseException {
    return parser.parseRoutineParam(sqlText);
  }

  @Override
  public StructType parseTableSchema(String sqlText) throws ParseException {
    return parser.parseTableSchema(sqlText);
  }

  @Override
  public DataType parseDataType(String sqlText) throws ParseException {
    return parser.parseDataType(sqlText);
  }
}
