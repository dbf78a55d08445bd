package lakehouse.serving;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Read-only SQL for analysts and BI tools, for every way in: the Thrift (JDBC/ODBC) server, Spark
 * Connect and the embedded `lakehouse sql`. In a read-only session no statement changes anything and
 * no client code runs on the server.
 *
 * <p>Four checks, each on the JVM side: the session's parser refuses a statement that changes
 * anything as soon as it is parsed ({@link ReadOnlyParser}); a check rule judges every analysed plan
 * before anything runs, against an allow-list of plan nodes and expressions that only read, over
 * the lakehouse's tables ({@link ReadOnlyPlans}, {@link LakehouseTables}); the service's Connect
 * interceptor judges what a Connect client sends before it is planned ({@link ReadOnlyConnectGate});
 * and its Thrift server judges the settings a JDBC or ODBC client opens a session with ({@link
 * ReadOnlyThriftServer}). Each refusal is a {@link ReadOnlyViolation} whose message starts with
 * "read-only:" and names the operation.
 *
 * <p>Which sessions may write: with {@code spark.lakehouse.readOnly=true} in the JVM's Spark
 * configuration (the service), every session is read-only except those the platform's own driver
 * code marks writable through {@link #setWritable}, and the Connect sessions of the platform's jobs,
 * which present the service's write token in their {@code spark.lakehouse.writeToken} setting.
 * Sessions a client opens are new sessions, so they read only. A client cannot change this: the flag
 * is read from the SparkContext's configuration, fixed at start; the marks and the token live in
 * this class, out of SQL's reach; SET is refused, and so is any conf over Connect or in a JDBC URL
 * but a few that shape results ({@link ReadOnlyConfs}).
 */
public final class ReadOnlyExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  public static final String READ_ONLY = "spark.lakehouse.readOnly";

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
    extensions.injectParser(ReadOnlyParser::new);
    extensions.injectCheckRule(
        session ->
            new AbstractFunction1<LogicalPlan, BoxedUnit>() {
              @Override
              public BoxedUnit apply(LogicalPlan plan) {
                if (readOnly(session)) {
                  ReadOnlyPlans.check(session, plan);
                }
                return BoxedUnit.UNIT;
              }
            });
    return BoxedUnit.UNIT;
  }

  /** The error every client sees; its message starts with "read-only:". */
  public static final class ReadOnlyViolation extends SecurityException {
    public ReadOnlyViolation(String reason) {
      super("read-only: " + reason);
    }
  }
}
