package lakehouse.serving;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.List;
import org.apache.hadoop.hive.common.ServerUtils;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hive.service.CompositeService;
import org.apache.hive.service.Service;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.thrift.ThriftBinaryCLIService;
import org.apache.hive.service.cli.thrift.ThriftCLIService;
import org.apache.hive.service.server.HiveServer2;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.HiveUtils$;
import org.apache.spark.sql.hive.client.HiveClientImpl;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2$;

/**
 * The Spark service's Thrift (JDBC/ODBC) server: Spark's own, whose sessions open only with the
 * settings a read-only session may have ({@link ReadOnlyConfs}).
 *
 * <p>A HiveServer2 client opens a session with settings: the Hive JDBC driver sends a URL's hive
 * confs ({@code jdbc:hive2://host:port/db?key=value}) and hive variables ({@code #key=value}), and
 * Spark's session manager sets both in the new Spark session, with no statement for the parser or
 * the check rule to judge. A {@code spark.sql.catalog.*} plugin named there is a class the session
 * would load. So the open request is judged as it arrives, and a session with any other setting is
 * not opened: the client's connection fails with the "read-only:" reason. (The URL's session
 * variables, after {@code ;}, stay in the driver.)
 *
 * <p>Spark builds its Thrift endpoint inside the server's init, with no way to name another: {@link
 * #start} is Spark's HiveThriftServer2.startWithSparkSession(session, false), with the endpoint
 * replaced by a {@link ThriftGate} between init and start, before the port is open. (Spark's session
 * manager cannot be the one replaced: it sets its own fields by reflection on its superclass.)
 *
 * <p>The endpoint speaks TLS only, with the key store the driver made at its start: a client's
 * password and rows never cross the network in clear.
 */
public final class ReadOnlyThriftServer {
  private ReadOnlyThriftServer() {}

  /**
   * The Thrift server of {@code session}'s JVM, started, its sessions judged as they open, its
   * connections over TLS with the key and certificate of the PKCS12 {@code keyStore}.
   */
  public static HiveThriftServer2 start(SparkSession session, String keyStore, String keyStorePassword)
      throws ReflectiveOperationException {
    HiveThriftServer2$ servers = HiveThriftServer2$.MODULE$;
    servers.systemExitOnError().set(false);
    HiveClientImpl hive =
        HiveUtils$.MODULE$.newClientForExecution(session.sparkContext().conf(), session.sessionState().newHadoopConf());
    ServerUtils.cleanUpScratchDir(hive.conf());
    authenticate(hive.conf());
    encrypt(hive.conf(), keyStore, keyStorePassword);
    HiveThriftServer2 server = new HiveThriftServer2(session);
    server.init(hive.conf());
    gateEndpoint(server, hive.conf());
    server.start();
    Method listenerAndUi =
        HiveThriftServer2$.class.getDeclaredMethod("createListenerAndUI", HiveThriftServer2.class, SparkContext.class);
    listenerAndUi.setAccessible(true);
    listenerAndUi.invoke(servers, server, session.sparkContext());
    return server;
  }

  /**
   * Every connection logs in with a password {@link JdbcLogins} checks. HiveServer2 reads the
   * provider's class from a HiveConf of its own at each login, which sees the JVM's system
   * properties and not the server's conf: the class is named in both.
   */
  private static void authenticate(HiveConf conf) {
    String provider = JdbcLogins.class.getName();
    System.setProperty(HiveConf.ConfVars.HIVE_SERVER2_CUSTOM_AUTHENTICATION_CLASS.varname, provider);
    conf.setVar(HiveConf.ConfVars.HIVE_SERVER2_CUSTOM_AUTHENTICATION_CLASS, provider);
    conf.setVar(HiveConf.ConfVars.HIVE_SERVER2_AUTHENTICATION, "CUSTOM");
  }

  /**
   * TLS on the binary endpoint (HiveServer2 opens an SSL server socket). The key store's password
   * is set in this JVM's conf only: it is in no command line and no file.
   */
  private static void encrypt(HiveConf conf, String keyStore, String keyStorePassword) {
    conf.setBoolVar(HiveConf.ConfVars.HIVE_SERVER2_USE_SSL, true);
    conf.setVar(HiveConf.ConfVars.HIVE_SERVER2_SSL_KEYSTORE_PATH, keyStore);
    conf.setVar(HiveConf.ConfVars.HIVE_SERVER2_SSL_KEYSTORE_PASSWORD, keyStorePassword);
  }

  /** Put a {@link ThriftGate} where the server (inited, not started) keeps its Thrift endpoint. */
  @SuppressWarnings("unchecked")
  private static void gateEndpoint(HiveThriftServer2 server, HiveConf conf) throws ReflectiveOperationException {
    CLIService cli = (CLIService) service(server, CLIService.class);
    if (!(service(server, ThriftCLIService.class) instanceof ThriftBinaryCLIService endpoint)) {
      throw new IllegalStateException("the read-only Thrift server serves the binary transport only");
    }
    ThriftGate gate = new ThriftGate(cli);
    gate.init(conf);
    Field field = HiveServer2.class.getDeclaredField("thriftCLIService");
    field.setAccessible(true);
    field.set(server, gate);
    Field services = CompositeService.class.getDeclaredField("serviceList");
    services.setAccessible(true);
    List<Service> started = (List<Service>) services.get(server);
    started.set(started.indexOf(endpoint), gate);
  }

  private static Service service(HiveThriftServer2 server, Class<?> type) {
    return server.getServices().stream().filter(type::isInstance).findFirst().orElseThrow();
  }
}
