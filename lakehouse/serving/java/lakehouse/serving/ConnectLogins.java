package lakehouse.serving;

import java.util.Map;
import org.apache.spark.connect.proto.ExecutePlanRequest;
import org.apache.spark.connect.proto.ExecutePlanResponse;
import org.sparkproject.connect.grpc.ForwardingServerCall.SimpleForwardingServerCall;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.connect.protobuf.Message;

/**
 * Spark Connect's logins, and its half of the {@link QueryLog}: a gRPC interceptor, run before
 * every other (spark.connect.grpc.interceptor.classes names it last), that lets a request through
 * only when its bearer token ({@code Authorization: Bearer ...}) is the one of the user the request
 * names ({@code user_context.user_id}), as {@link Logins} knows them; and logs each plan executed,
 * with the rows sent back and how it ended, refusals of the interceptors after it included.
 *
 * <p>Every request carries the token, so a token is checked at each one (remembered once verified,
 * {@link UsersFile}), and a token of one user presented under another's name is refused.
 */
public final class ConnectLogins implements ServerInterceptor {
  static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    String token = bearer(headers.get(AUTHORIZATION));
    LoggedCall<Q, R> logged = new LoggedCall<>(call);
    return new RefusableListener<Q>(next.startCall(logged, headers)) {
      @Override
      public void onMessage(Q request) {
        String user = refused ? null : userOf(request);
        if (!refused) {
          try {
            Logins.role(user, token);
          } catch (LoginRefused refusal) {
            refused = true;
            QueryLog.record(user, QueryLog.CONNECT, "", System.currentTimeMillis(), 0, refusal.getMessage());
            logged.closeUnlogged(Status.UNAUTHENTICATED.withDescription(refusal.getMessage()));
          }
        }
        if (!refused) {
          logged.starting(request, user);
          super.onMessage(request);
        }
      }
    };
  }

  private static String bearer(String header) {
    String prefix = "bearer ";
    return header != null && header.regionMatches(true, 0, prefix, 0, prefix.length())
        ? header.substring(prefix.length()).strip()
        : null;
  }

  /** The user a request names ({@code user_context.user_id}), or null. */
  static String userOf(Object request) {
    if (!(request instanceof Message message)) {
      return null;
    }
    FieldDescriptor context = message.getDescriptorForType().findFieldByName("user_context");
    if (context == null) {
      return null;
    }
    Message user = (Message) message.getField(context);
    return (String) user.getField(user.getDescriptorForType().findFieldByName("user_id"));
  }

  /** What a plan does, for the log: its SQL when it holds some, else its kind and the tables it names. */
  static String statement(Message plan) {
    String sql = firstField(plan, "spark.connect.SQL", "query");
    if (sql != null) {
      return sql;
    }
    String table = firstField(plan, "spark.connect.Read.NamedTable", "unparsed_identifier");
    StringBuilder kinds = new StringBuilder("dataframe:");
    Message step = plan;
    for (int depth = 0; depth < 3 && step != null; depth++) {
      Map.Entry<FieldDescriptor, Object> chosen = step.getAllFields().entrySet().stream()
          .filter(field -> field.getKey().getContainingOneof() != null).findFirst().orElse(null);
      if (chosen == null) {
        break;
      }
      kinds.append(' ').append(chosen.getKey().getName());
      step = chosen.getValue() instanceof Message inner ? inner : null;
    }
    return table == null ? kinds.toString() : kinds + " on " + table;
  }

  private static String firstField(Message message, String type, String field) {
    if (message.getDescriptorForType().getFullName().equals(type)) {
      Object value = message.getField(message.getDescriptorForType().findFieldByName(field));
      return value instanceof String text && !text.isEmpty() ? text : null;
    }
    for (Map.Entry<FieldDescriptor, Object> entry : message.getAllFields().entrySet()) {
      if (entry.getKey().getJavaType() != FieldDescriptor.JavaType.MESSAGE) {
        continue;
      }
      for (Object value : entry.getKey().isRepeated() ? (Iterable<?>) entry.getValue() : java.util.List.of(entry.getValue())) {
        String found = firstField((Message) value, type, field);
        if (found != null) {
          return found;
        }
      }
    }
    return null;
  }

  /** A call whose executed plan is logged when it closes: its user, statement, rows and outcome. */
  static final class LoggedCall<Q, R> extends SimpleForwardingServerCall<Q, R> {
    private volatile String user, statement;
    private volatile long started, rows;

    LoggedCall(ServerCall<Q, R> call) {
      super(call);
    }

    /**
     * Follows an executed plan, unless it is the client's own housekeeping: pyspark asks, as it
     * stops, to clean an ML cache no session here has (refused by the gate, and no query).
     */
    void starting(Object request, String who) {
      if (request instanceof ExecutePlanRequest execute && statement == null && !execute.getPlan().getCommand().hasMlCommand()) {
        user = who;
        statement = statement(execute.getPlan());
        started = System.currentTimeMillis();
      }
    }

    void closeUnlogged(Status status) {
      super.close(status, new Metadata());
    }

    @Override
    public void sendMessage(R response) {
      if (response instanceof ExecutePlanResponse answer && answer.hasArrowBatch()) {
        rows += answer.getArrowBatch().getRowCount();
      } else if (response instanceof ExecutePlanResponse answer && answer.getSqlCommandResult().getRelation().hasSql()) {
        // spark.sql() of a query: the server hands the query back to be run when its rows are
        // asked for, and logs it then, with them.
        statement = null;
      }
      super.sendMessage(response);
    }

    @Override
    public void close(Status status, Metadata trailers) {
      if (statement != null) {
        String error = status.isOk() ? null : status.getDescription() == null ? status.getCode().name() : status.getDescription();
        QueryLog.record(user, QueryLog.CONNECT, statement, started, rows, error);
      }
      super.close(status, trailers);
    }
  }
}
