package lakehouse.serving;

import java.util.Map;
import java.util.Set;

/**
 * The session settings a read-only session may set or unset, whichever way a client sets one: a
 * Connect client's conf request ({@link ReadOnlyConnectGate}) or the settings a JDBC client names
 * in its URL ({@link ReadOnlyThriftServer}). SQL's SET is a command, refused by the parser.
 *
 * <p>They shape results and plans and nothing the rule reads. Anything else could change what a
 * session may reach: a {@code spark.sql.catalog.*} plugin names a class for the session to load,
 * and a Hadoop setting a file system's.
 */
public final class ReadOnlyConfs {
  private ReadOnlyConfs() {}

  /** The write token may be presented: a wrong one changes nothing. */
  static final Set<String> SETTABLE =
      Set.of(
          ReadOnlyExtension.WRITE_TOKEN_CONF,
          "spark.sql.session.timeZone",
          "spark.sql.ansi.enabled",
          "spark.sql.shuffle.partitions",
          "spark.sql.adaptive.enabled",
          "spark.databricks.delta.stats.skipping");

  /**
   * The prefixes by which HiveServer2's open request sets a conf of the new session (the Hive JDBC
   * driver sends a URL's {@code ?key=value} pairs as "set:hiveconf:", its {@code #key=value} pairs
   * as "set:hivevar:"); Spark's Thrift server sets both in the session.
   */
  static final Set<String> OPEN_REQUEST_CONFS = Set.of("set:hiveconf:", "set:hivevar:");

  /**
   * What the Hive JDBC driver sends with every connection: the URL's database (Spark's Thrift
   * server runs USE on it, which the rule judges) and the driver's fetch size.
   */
  static final Set<String> DRIVER_SETTINGS =
      Set.of("use:database", "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size");

  /** Why a read-only session may not set {@code key}, or null when it may. */
  static String refusal(String key) {
    return SETTABLE.contains(key)
        ? null
        : "setting " + key + " is not allowed; a session here may set only "
            + String.join(", ", SETTABLE.stream().sorted().toList());
  }

  /**
   * Why a HiveServer2 open request's settings may not open a read-only session, or null when they
   * may: each is one the driver sends, or a settable conf. Any other prefix acts on more than the
   * session ("set:system:" sets a property of the whole JVM, "set:metaconf:" the metastore's).
   */
  public static String openRefusal(Map<String, String> settings) {
    for (String key : settings == null ? Set.<String>of() : settings.keySet()) {
      if (DRIVER_SETTINGS.contains(key)) {
        continue;
      }
      String prefix = OPEN_REQUEST_CONFS.stream().filter(key::startsWith).findFirst().orElse(null);
      String refusal = refusal(prefix == null ? key : key.substring(prefix.length()));
      if (refusal != null) {
        return refusal + " (in the connection's settings)";
      }
    }
    return null;
  }
}
