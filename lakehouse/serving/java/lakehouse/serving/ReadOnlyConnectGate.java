package lakehouse.serving;

import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SessionKey;
import org.apache.spark.sql.connect.service.SparkConnectService$;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.connect.protobuf.Descriptors.OneofDescriptor;
import org.sparkproject.connect.protobuf.Message;
import scala.Option;

/**
 * The Spark Connect half of the read-only rule: a gRPC interceptor that judges each request of a
 * read-only session before the server plans it (spark.connect.grpc.interceptor.classes).
 *
 * <p>Some of what a Connect client sends acts before, or without, an analysed plan: a Scala UDF's
 * payload is deserialised and a Python UDTF's analyze method runs while the plan is built; caching a
 * table, adding a JAR, registering a function or a streaming listener, and setting a conf go straight
 * to the session. So the gate is an allow-list of the protocol's own vocabulary: the request types,
 * and for every relation, expression, command, catalog call, analysis and conf operation anywhere
 * in a request, the kinds that only read. What passes is then planned and judged by {@link
 * ReadOnlyPlans}. A kind a later Spark adds is refused until it is added here.
 */
public final class ReadOnlyConnectGate implements ServerInterceptor {
  static final Set<String> REQUESTS =
      Set.of(
          "ExecutePlanRequest", "AnalyzePlanRequest", "ConfigRequest", "ArtifactStatusesRequest",
          "InterruptRequest", "ReattachExecuteRequest", "ReleaseExecuteRequest",
          "ReleaseSessionRequest", "FetchErrorDetailsRequest");

  /** For each guarded choice of the protocol, the choices a read-only session may make. */
  static final Map<String, Set<String>> READING_CHOICES =
      Map.of(
          "spark.connect.Plan.op_type", Set.of("root", "command"),
          "spark.connect.Relation.rel_type",
              Set.of(
                  "read", "project", "filter", "join", "set_op", "sort", "limit", "aggregate", "sql",
                  "local_relation", "sample", "offset", "deduplicate", "range", "subquery_alias",
                  "repartition", "to_df", "with_columns_renamed", "show_string", "drop", "tail",
                  "with_columns", "hint", "unpivot", "to_schema", "repartition_by_expression",
                  "parse", "html_string", "as_of_join", "with_relations", "transpose",
                  "unresolved_table_valued_function", "lateral_join", "fill_na", "drop_na",
                  "replace", "summary", "crosstab", "describe", "cov", "corr", "approx_quantile",
                  "freq_items", "sample_by", "catalog"),
          "spark.connect.Expression.expr_type",
              Set.of(
                  "literal", "unresolved_attribute", "unresolved_function", "expression_string",
                  "unresolved_star", "alias", "cast", "unresolved_regex", "sort_order",
                  "lambda_function", "window", "unresolved_extract_value", "update_fields",
                  "unresolved_named_lambda_variable", "call_function", "named_argument_expression",
                  "subquery_expression"),
          // Judged by ReadOnlyPlans once planned: each is refused there unless it only reads.
          "spark.connect.Command.command_type",
              Set.of(
                  "sql_command", "write_operation", "write_operation_v2", "create_dataframe_view",
                  "merge_into_table_command"),
          "spark.connect.Catalog.cat_type",
              Set.of(
                  "current_database", "set_current_database", "list_databases", "list_tables",
                  "list_functions", "list_columns", "get_database", "get_table", "get_function",
                  "database_exists", "table_exists", "function_exists", "drop_temp_view",
                  "is_cached", "refresh_table", "refresh_by_path", "current_catalog",
                  "set_current_catalog", "list_catalogs"),
          "spark.connect.AnalyzePlanRequest.analyze",
              Set.of(
                  "schema", "explain", "tree_string", "is_local", "is_streaming", "input_files",
                  "spark_version", "ddl_parse", "same_semantics", "semantic_hash",
                  "get_storage_level", "json_to_ddl"),
          "spark.connect.ConfigRequest.Operation.op_type",
              Set.of("set", "get", "get_with_default", "get_option", "get_all", "unset", "is_modifiable"));

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    return new RefusableListener<Q>(next.startCall(call, headers)) {
      @Override
      public void onMessage(Q request) {
        String refusal = refused ? null : refusal(request);
        if (refusal != null) {
          refused = true;
          call.close(Status.PERMISSION_DENIED.withDescription("read-only: " + refusal), new Metadata());
        }
        if (!refused) {
          super.onMessage(request);
        }
      }
    };
  }

  /** Why a request may not run in its session, or null when it may. */
  static String refusal(Object request) {
    if (!(request instanceof Message message) || !readOnly(message)) {
      return null;
    }
    String type = message.getDescriptorForType().getName();
    if (!REQUESTS.contains(type)) {
      return type + " is not known to only read (a session that reads adds no artifacts)";
    }
    return refusalWithin(message);
  }

  private static String refusalWithin(Message message) {
    String full = message.getDescriptorForType().getFullName();
    for (OneofDescriptor choice : message.getDescriptorForType().getOneofs()) {
      Set<String> allowed = READING_CHOICES.get(choice.getFullName());
      if (allowed != null && message.hasOneof(choice)) {
        String made = message.getOneofFieldDescriptor(choice).getName();
        if (!allowed.contains(made)) {
          return made + " (" + full + ") runs code or changes state on the server, and a session here only reads";
        }
      }
    }
    String refusal = null;
    if (full.equals("spark.connect.ConfigRequest.Set") || full.equals("spark.connect.ConfigRequest.Unset")) {
      refusal = confRefusal(message);
    } else if (full.equals("spark.connect.Read.DataSource")) {
      refusal = sourceRefusal(message);
    }
    if (refusal != null) {
      return refusal;
    }
    for (Map.Entry<FieldDescriptor, Object> field : message.getAllFields().entrySet()) {
      if (field.getKey().getJavaType() != FieldDescriptor.JavaType.MESSAGE) {
        continue;
      }
      List<?> values = field.getKey().isRepeated() ? (List<?>) field.getValue() : List.of(field.getValue());
      for (Object value : values) {
        refusal = refusalWithin((Message) value);
        if (refusal != null) {
          return refusal;
        }
      }
    }
    return null;
  }

  /**
   * Reading files of another format (text, JSON, CSV ...) reads the server's own files, and infers
   * their schema while the plan is built, before it is judged: a session here reads Delta tables.
   */
  private static String sourceRefusal(Message source) {
    Object format = source.getField(source.getDescriptorForType().findFieldByName("format"));
    return "delta".equals(format)
        ? null
        : "reading " + format + " files reads the server's own files; a session here reads the lakehouse's Delta tables";
  }

  /** A Set's pairs (key, value) or an Unset's keys, each of which must be settable ({@link ReadOnlyConfs}). */
  private static String confRefusal(Message operation) {
    for (FieldDescriptor field : operation.getDescriptorForType().getFields()) {
      if (!field.isRepeated()) {
        continue;
      }
      for (Object entry : (List<?>) operation.getField(field)) {
        Object key = entry instanceof Message pair ? pair.getField(pair.getDescriptorForType().findFieldByName("key")) : entry;
        String refusal = ReadOnlyConfs.refusal(String.valueOf(key));
        if (refusal != null) {
          return refusal;
        }
      }
    }
    return null;
  }

  /** Whether the request's session reads only: a session not created yet has presented no token. */
  private static boolean readOnly(Message request) {
    FieldDescriptor sessionField = request.getDescriptorForType().findFieldByName("session_id");
    FieldDescriptor userField = request.getDescriptorForType().findFieldByName("user_context");
    if (sessionField == null || userField == null) {
      return true;
    }
    Message user = (Message) request.getField(userField);
    String userId = (String) user.getField(user.getDescriptorForType().findFieldByName("user_id"));
    SessionKey key = SessionKey.apply(userId, (String) request.getField(sessionField));
    Option<SessionHolder> holder = SparkConnectService$.MODULE$.sessionManager().getIsolatedSessionIfPresent(key);
    SparkSession session = holder.isDefined() ? holder.get().session() : null;
    return session == null || ReadOnlyExtension.readOnly(session);
  }
}
