package lakehouse.serving;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.hive.common.ServerUtils;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hive.service.CompositeService;
import org.apache.hive.service.Service;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.rpc.thrift.TProtocolVersion;
import org.apache.hive.service.server.HiveServer2;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.HiveUtils$;
import org.apache.spark.sql.hive.client.HiveClientImpl;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2$;
import org.apache.spark.sql.hive.thriftserver.SparkSQLSessionManager;

/**
 * The Spark service's Thrift (JDBC/ODBC) server: Spark's own, whose sessions open only with the
 * settings a read-only session may have ({@link ReadOnlyConfs}).
 *
 * <p>A HiveServer2 client opens a session with settings: the Hive JDBC driver sends a URL's hive
 * confs ({@code jdbc:hive2://host:port/db?key=value}) and hive variables ({@code #key=value}), and
 * Spark's session manager sets both in the new Spark session, with no statement for the parser or
 * the check rule to judge. A {@code spark.sql.catalog.*} plugin named there is a class the session
 * would load. So the open request is judged before Spark's session manager sees it, and a session
 * with any other setting is not opened: the client's connection fails with the "read-only:" reason.
 * (The URL's session variables, after {@code ;}, stay in the driver.)
 *
 * <p>Spark builds its session manager inside the server's init, with no way to name another: {@link
 * #start} is Spark's HiveThriftServer2.startWithSparkSession(session, false), with Spark's session
 * manager replaced by {@link Sessions} between init and start, before the port is open.
 */
public final class ReadOnlyThriftServer {
  private ReadOnlyThriftServer() {}

  /** The Thrift server of {@code session}'s JVM, started, its sessions judged as they open. */
  public static HiveThriftServer2 start(SparkSession session) throws ReflectiveOperationException {
    HiveThriftServer2$ servers = HiveThriftServer2$.MODULE$;
    servers.systemExitOnError().set(false);
    HiveClientImpl hive =
        HiveUtils$.MODULE$.newClientForExecution(session.sparkContext().conf(), session.sessionState().newHadoopConf());
    ServerUtils.cleanUpScratchDir(hive.conf());
    HiveThriftServer2 server = new HiveThriftServer2(session);
    server.init(hive.conf());
    judgeOpenedSessions(server, session, hive.conf());
    server.start();
    Method listenerAndUi =
        HiveThriftServer2$.class.getDeclaredMethod("createListenerAndUI", HiveThriftServer2.class, SparkContext.class);
    listenerAndUi.setAccessible(true);
    listenerAndUi.invoke(servers, server, session.sparkContext());
    return server;
  }

  /** Put {@link Sessions} where the server's CLI service keeps Spark's session manager (inited, not started). */
  @SuppressWarnings("unchecked")
  private static void judgeOpenedSessions(HiveThriftServer2 server, SparkSession session, HiveConf conf)
      throws ReflectiveOperationException {
    CLIService cli =
        (CLIService) server.getServices().stream().filter(CLIService.class::isInstance).findFirst().orElseThrow();
    SessionManager sparks = cli.getSessionManager();
    Sessions judged = new Sessions(server, session);
    judged.init(conf);
    Field manager = CLIService.class.getDeclaredField("sessionManager");
    manager.setAccessible(true);
    manager.set(cli, judged);
    Field services = CompositeService.class.getDeclaredField("serviceList");
    services.setAccessible(true);
    List<Service> started = (List<Service>) services.get(cli);
    started.set(started.indexOf(sparks), judged);
  }

  /** Spark's session manager, opening a session only when its settings pass {@link ReadOnlyConfs#openRefusal}. */
  static final class Sessions extends SparkSQLSessionManager {
    Sessions(HiveServer2 server, SparkSession session) {
      super(server, session);
    }

    /** Thrift's answer to a refused request is the exception's message, "read-only: ...". */
    @Override
    public SessionHandle openSession(
        TProtocolVersion protocol,
        String username,
        String password,
        String ipAddress,
        Map<String, String> settings,
        boolean withImpersonation,
        String delegationToken) {
      String refusal = ReadOnlyConfs.openRefusal(settings);
      if (refusal != null) {
        throw new ReadOnlyExtension.ReadOnlyViolation(refusal);
      }
      return super.openSession(protocol, username, password, ipAddress, settings, withImpersonation, delegationToken);
    }
  }
}
