package lakehouse.serving;

import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.rpc.thrift.TSessionHandle;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SessionHolderInfo;
import org.apache.spark.sql.connect.service.SessionKey;
import org.apache.spark.sql.connect.service.SparkConnectService$;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Whose a client's Spark session is, for what only some roles may read (the query log): a Thrift
 * session's user is noted as it opens ({@link ThriftGate}); a Connect session's is the user its
 * session holder was created for, every request of which {@link ConnectLogins} authenticated.
 */
final class SessionUsers {
  private static final Map<SparkSession, String> THRIFT = Collections.synchronizedMap(new WeakHashMap<>());

  private SessionUsers() {}

  /** Notes the user of the Spark session the Thrift server opened for {@code handle}. */
  static void opened(CLIService cli, TSessionHandle handle, String user) {
    if (handle != null && cli.getSessionManager().getOperationManager() instanceof SparkSQLOperationManager spark) {
      SparkSession session = spark.sessionToContexts().get(new SessionHandle(handle));
      if (session != null) {
        THRIFT.put(session, user);
      }
    }
  }

  /** The user of a client's session, or null when it is none of theirs (the driver's own, say). */
  static String userOf(SparkSession session) {
    String user = THRIFT.get(session);
    if (user != null) {
      return user;
    }
    var connect = SparkConnectService$.MODULE$.sessionManager();
    for (SessionHolderInfo info : CollectionConverters.asJava(connect.listActiveSessions())) {
      Option<SessionHolder> holder = connect.getIsolatedSessionIfPresent(SessionKey.apply(info.userId(), info.sessionId()));
      if (holder.isDefined() && holder.get().session() == session) {
        return info.userId();
      }
    }
    return null;
  }
}
