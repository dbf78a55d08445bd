package lakehouse.serving;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hive.service.rpc.thrift.TColumn;
import org.apache.hive.service.rpc.thrift.TExecuteStatementReq;
import org.apache.hive.service.rpc.thrift.TExecuteStatementResp;
import org.apache.hive.service.rpc.thrift.TFetchResultsResp;
import org.apache.hive.service.rpc.thrift.TGetOperationStatusResp;
import org.apache.hive.service.rpc.thrift.TOperationHandle;
import org.apache.hive.service.rpc.thrift.TOperationState;
import org.apache.hive.service.rpc.thrift.TRowSet;
import org.apache.hive.service.rpc.thrift.TSessionHandle;
import org.apache.hive.service.rpc.thrift.TStatusCode;

/**
 * The Thrift server's statements, followed through HiveServer2's requests from the statement's
 * execution to its operation's close, for the {@link QueryLog}: who ran it (the session's
 * authenticated user), the rows fetched, and how it ended, as the client was told.
 */
final class ThriftQueries {
  /** A statement under way. */
  private static final class Running {
    final String user, statement;
    final TSessionHandle session;
    final long started;
    long rows;
    String error;

    Running(String user, TSessionHandle session, String statement, long started) {
      this.user = user;
      this.session = session;
      this.statement = statement;
      this.started = started;
    }
  }

  private final Map<TSessionHandle, String> users = new ConcurrentHashMap<>();
  private final Map<TOperationHandle, Running> running = new ConcurrentHashMap<>();

  void opened(TSessionHandle session, String user) {
    if (session != null) {
      users.put(session, user);
    }
  }

  /** The user a session was opened for, or null. */
  String userOf(TSessionHandle session) {
    return session == null ? null : users.get(session);
  }

  void executed(TExecuteStatementReq request, TExecuteStatementResp response, long started) {
    String user = users.getOrDefault(request.getSessionHandle(), "");
    Running statement = new Running(user, request.getSessionHandle(), request.getStatement(), started);
    if (response.getStatus().getStatusCode() == TStatusCode.ERROR_STATUS || !response.isSetOperationHandle()) {
      QueryLog.record(user, QueryLog.JDBC, statement.statement, started, 0, String.valueOf(response.getStatus().getErrorMessage()));
    } else {
      running.put(response.getOperationHandle(), statement);
    }
  }

  void fetched(TOperationHandle operation, TFetchResultsResp response) {
    Running statement = running.get(operation);
    if (statement != null && response.isSetResults()) {
      statement.rows += rows(response.getResults());
    }
  }

  /** The error the client is told its statement ended with, kept until the operation closes. */
  void polled(TOperationHandle operation, TGetOperationStatusResp response) {
    Running statement = running.get(operation);
    TOperationState state = response.getOperationState();
    if (statement != null && (state == TOperationState.ERROR_STATE || state == TOperationState.CANCELED_STATE)) {
      statement.error = response.isSetErrorMessage() ? response.getErrorMessage() : state.name();
    }
  }

  void closed(TOperationHandle operation) {
    Running statement = running.remove(operation);
    if (statement != null) {
      QueryLog.record(statement.user, QueryLog.JDBC, statement.statement, statement.started, statement.rows, statement.error);
    }
  }

  /** A session closed with statements still open: HiveServer2 closes them, and they are logged now. */
  void sessionClosed(TSessionHandle session) {
    users.remove(session);
    List<TOperationHandle> open = running.entrySet().stream().filter(e -> e.getValue().session.equals(session)).map(Map.Entry::getKey).toList();
    open.forEach(this::closed);
  }

  private static long rows(TRowSet rows) {
    if (rows.isSetColumns() && !rows.getColumns().isEmpty()) {
      TColumn first = rows.getColumns().get(0);
      Object values = first.getFieldValue();
      try {
        return ((List<?>) values.getClass().getMethod("getValues").invoke(values)).size();
      } catch (ReflectiveOperationException unknown) {
        return 0;
      }
    }
    return rows.getRowsSize();
  }
}
