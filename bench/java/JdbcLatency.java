import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/**
 * A JDBC client of the Spark service for the SQL latency bench: one connection (as a BI tool keeps),
 * each statement of a file (one a line) once to warm up, then once timed (or in turn for the seconds
 * a third argument gives); prints the seconds of each timed statement, one a line. Run with
 * pyspark's JARs on the class path (the Hive JDBC driver).
 */
public final class JdbcLatency {
  public static void main(String[] args) throws Exception {
    List<String> statements = Files.readAllLines(Path.of(args[1]));
    // Logged in as the bench's analyst, from the environment (a password in no command line).
    String user = System.getenv("LAKEHOUSE_SQL_USER"), password = System.getenv("LAKEHOUSE_SQL_PASSWORD");
    try (Connection connection = DriverManager.getConnection(args[0], user, password)) {
      // A warm-up pass; in the timed loop's mode below, its first statement only (the connection's).
      for (String statement : args.length > 2 ? statements.subList(0, 1) : statements) {
        run(connection, statement);
      }
      // Once each, or, given a third argument, in turn without pause for that many seconds, the
      // first line then saying when the timed queries began (Unix seconds).
      List<Double> seconds = new ArrayList<>();
      if (args.length > 2) {
        long until = System.nanoTime() + (long) (Double.parseDouble(args[2]) * 1e9);
        System.out.println(System.currentTimeMillis() / 1e3);
        for (int next = 0; System.nanoTime() < until; next++) {
          seconds.add(timed(connection, statements.get(next % statements.size())));
        }
      } else {
        for (String statement : statements) {
          seconds.add(timed(connection, statement));
        }
      }
      seconds.forEach(System.out::println);
    }
  }

  private static double timed(Connection connection, String statement) throws Exception {
    long began = System.nanoTime();
    run(connection, statement);
    return (System.nanoTime() - began) / 1e9;
  }

  private static void run(Connection connection, String statement) throws Exception {
    try (Statement query = connection.createStatement();
        ResultSet rows = query.executeQuery(statement)) {
      while (rows.next()) {}
    }
  }
}
