package lakehouse.serving;

import org.apache.hive.service.auth.TSetIpAddressProcessor;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.thrift.ThriftBinaryCLIService;
import org.apache.hive.service.rpc.thrift.TCloseOperationReq;
import org.apache.hive.service.rpc.thrift.TCloseOperationResp;
import org.apache.hive.service.rpc.thrift.TCloseSessionReq;
import org.apache.hive.service.rpc.thrift.TCloseSessionResp;
import org.apache.hive.service.rpc.thrift.TExecuteStatementReq;
import org.apache.hive.service.rpc.thrift.TExecuteStatementResp;
import org.apache.hive.service.rpc.thrift.TFetchResultsReq;
import org.apache.hive.service.rpc.thrift.TFetchResultsResp;
import org.apache.hive.service.rpc.thrift.TGetOperationStatusReq;
import org.apache.hive.service.rpc.thrift.TGetOperationStatusResp;
import org.apache.hive.service.rpc.thrift.TOpenSessionReq;
import org.apache.hive.service.rpc.thrift.TOpenSessionResp;
import org.apache.thrift.TException;

/**
 * HiveServer2's binary endpoint, opening a session only for the user its login proved ({@link
 * JdbcLogins}) and with settings that pass {@link ReadOnlyConfs#openRefusal}, and logging each
 * statement ({@link ThriftQueries}).
 */
final class ThriftGate extends ThriftBinaryCLIService {
  private final ThriftQueries queries = new ThriftQueries();

  ThriftGate(CLIService cli) {
    super(cli);
  }

  /** A refused request is answered as a failed one is, with the reason as its message. */
  @Override
  public TOpenSessionResp OpenSession(TOpenSessionReq request) throws TException {
    long started = System.currentTimeMillis();
    String user = JdbcLogins.authenticated();
    String refusal = ReadOnlyConfs.openRefusal(request.getConfiguration());
    SecurityException refused = refusal == null ? null : new ReadOnlyExtension.ReadOnlyViolation(refusal);
    if (user == null || !user.equals(TSetIpAddressProcessor.getUserName())) {
      refused = new LoginRefused("the session's user is not the one the login proved");
    }
    if (refused == null) {
      TOpenSessionResp opened = super.OpenSession(request);
      queries.opened(opened.getSessionHandle(), user);
      SessionUsers.opened(cliService, opened.getSessionHandle(), user);
      return opened;
    }
    QueryLog.record(user, QueryLog.JDBC, "", started, 0, refused.getMessage());
    TOpenSessionResp answer = new TOpenSessionResp();
    answer.setStatus(HiveSQLException.toTStatus(refused));
    return answer;
  }

  /** A statement runs only while its session's user is still a user of the service. */
  @Override
  public TExecuteStatementResp ExecuteStatement(TExecuteStatementReq request) throws TException {
    long started = System.currentTimeMillis();
    TExecuteStatementResp response;
    try {
      String user = queries.userOf(request.getSessionHandle());
      if (user != null) { // else no session of this server: HiveServer2 refuses the statement itself
        Logins.stillAllowed(user);
      }
      response = super.ExecuteStatement(request);
    } catch (LoginRefused refused) {
      response = new TExecuteStatementResp();
      response.setStatus(HiveSQLException.toTStatus(refused));
    }
    queries.executed(request, response, started);
    return response;
  }

  @Override
  public TGetOperationStatusResp GetOperationStatus(TGetOperationStatusReq request) throws TException {
    TGetOperationStatusResp response = super.GetOperationStatus(request);
    queries.polled(request.getOperationHandle(), response);
    return response;
  }

  @Override
  public TFetchResultsResp FetchResults(TFetchResultsReq request) throws TException {
    TFetchResultsResp response = super.FetchResults(request);
    if (request.getFetchType() == 0) { // the rows; 1 asks for the operation's log
      queries.fetched(request.getOperationHandle(), response);
    }
    return response;
  }

  @Override
  public TCloseOperationResp CloseOperation(TCloseOperationReq request) throws TException {
    queries.closed(request.getOperationHandle());
    return super.CloseOperation(request);
  }

  @Override
  public TCloseSessionResp CloseSession(TCloseSessionReq request) throws TException {
    queries.sessionClosed(request.getSessionHandle());
    return super.CloseSession(request);
  }
}
