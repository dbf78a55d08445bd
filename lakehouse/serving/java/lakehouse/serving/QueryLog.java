package lakehouse.serving;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.datasources.LogicalRelation;

/**
 * Every statement the endpoints run, and every refused login, one JSON line each in a file a day
 * under the service's home ({@code <home>/service/query-log/}), which the service exposes as the
 * table {@code lakehouse.query_log}.
 *
 * <p>A line is appended as its statement ends: one write of a few hundred bytes to a file opened for
 * appending, with no commit, no table version and no fsync, so that logging adds microseconds to a
 * query. The kernel holds the line once written, so a crash of the service loses none; a crash of
 * the machine may lose the last lines. Nothing rewrites a line: the log is append-only.
 */
public final class QueryLog {
  public static final String JDBC = "jdbc";
  public static final String CONNECT = "connect";
  public static final String OK = "ok";
  public static final String REFUSED = "refused";
  public static final String FAILED = "failed";

  /** The longest statement kept; a longer one is cut there (the log is not a data store). */
  static final int STATEMENT_CHARS = 10_000;

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final DateTimeFormatter DAY = DateTimeFormatter.ofPattern("yyyy-MM-dd").withZone(ZoneOffset.UTC);
  private static volatile Path folder;
  /** When a statement of someone other than the platform's jobs last ended, epoch milliseconds. */
  private static volatile long lastReaderStatementMillis;

  private QueryLog() {}

  /** Set by the service's driver at start; until then (and outside the service) nothing is logged. */
  public static void configure(String logFolder) {
    folder = Path.of(logFolder);
  }

  /** Whether a relation reads the log by its table's name: the one table of JSON files a session may read. */
  static boolean readsLog(LogicalRelation relation) {
    Path logs = folder;
    if (logs == null || relation.catalogTable().isEmpty()) {
      return false;
    }
    URI location = relation.catalogTable().get().location();
    return "file".equals(location.getScheme()) && Path.of(location).equals(logs);
  }

  /** Throws unless the session's user may read the log: an operator's, or the platform's jobs'. */
  static void checkReader(SparkSession session) {
    String user = SessionUsers.userOf(session);
    String role = Logins.loggedInRole(user);
    if (!Logins.OPERATOR.equals(role) && !Logins.PLATFORM.equals(role)) {
      String who = role == null ? "this session's user is not known" : user + " is an " + role;
      throw ReadOnlyPlans.refused("lakehouse.query_log is read by operators only, and " + who);
    }
  }

  /** The outcome of a statement that ended with {@code error} (null: none). */
  static String outcome(String error) {
    if (error == null) {
      return OK;
    }
    return error.contains("read-only: ") || error.contains(LoginRefused.PREFIX) ? REFUSED : FAILED;
  }

  /**
   * Appends one statement's line.
   *
   * @param user who ran it (for a refused login: the name offered)
   * @param endpoint {@link #JDBC} or {@link #CONNECT}
   * @param statement the SQL, or what a Connect plan does; empty for a login
   * @param startMillis when it started, epoch milliseconds
   * @param rows the rows it returned to the client
   * @param error why it was refused or failed, or null
   */
  public static void record(String user, String endpoint, String statement, long startMillis, long rows, String error) {
    // A refused login is nobody's query: a stray client retrying a wrong password must not keep the
    // snapshot warmer building beside the platform's jobs.
    boolean loginRefused = error != null && error.contains(LoginRefused.PREFIX);
    if (!loginRefused && !Logins.PLATFORM.equals(Logins.loggedInRole(user))) {
      lastReaderStatementMillis = System.currentTimeMillis();
    }
    Path logs = folder;
    if (logs == null) {
      return;
    }
    ObjectNode line = JSON.createObjectNode();
    line.put("user_name", user == null ? "" : user);
    line.put("endpoint", endpoint);
    line.put("statement", statement.length() > STATEMENT_CHARS ? statement.substring(0, STATEMENT_CHARS) : statement);
    line.put("started_at", Instant.ofEpochMilli(startMillis).toString());
    line.put("duration_ms", Math.max(0, System.currentTimeMillis() - startMillis));
    line.put("row_count", rows);
    line.put("outcome", outcome(error));
    line.put("error", error == null ? null : firstLine(error));
    append(logs.resolve("queries-" + DAY.format(Instant.ofEpochMilli(startMillis)) + ".jsonl"), line.toString() + "\n");
  }

  /** When a statement of someone other than the platform's jobs last ended (0: none since the start). */
  public static long lastReaderStatementMillis() {
    return lastReaderStatementMillis;
  }

  private static String firstLine(String text) {
    String line = text.strip().lines().findFirst().orElse("");
    return line.length() > 1000 ? line.substring(0, 1000) : line;
  }

  /** One write per line, under a lock: lines of concurrent statements never interleave. */
  private static synchronized void append(Path file, String line) {
    try {
      Files.writeString(file, line, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    } catch (IOException error) {
      // A query is not failed for its log line; the service's log says the line was lost.
      System.err.println("lakehouse: the query log could not be written: " + error);
    }
  }
}
