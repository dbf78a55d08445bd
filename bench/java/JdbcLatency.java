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
 * each statement of a file (one a line) once to warm up, then once timed; prints the seconds of
 * each timed statement, one a line. Run with pyspark's JARs on the class path (the Hive JDBC driver).
 */
public final class JdbcLatency {
  public static void main(String[] args) throws Exception {
    List<String> statements = Files.readAllLines(Path.of(args[1]));
    // Logged in as the bench's analyst, from the environment (a password in no command line).
    String user = System.getenv("LAKEHOUSE_SQL_USER"), password = System.getenv("LAKEHOUSE_SQL_PASSWORD");
    try (Connection connection = DriverManager.getConnection(args[0], user, password)) {
      for (String statement : statements) {
        run(connection, statement);
      }
      List<Double> seconds = new ArrayList<>();
      for (String statement : statements) {
        long began = System.nanoTime();
        run(connection, statement);
        seconds.add((System.nanoTime() - began) / 1e9);
      }
      seconds.forEach(System.out::println);
    }
  }

  private static void run(Connection connection, String statement) throws Exception {
    try (Statement query = connection.createStatement();
        ResultSet rows = query.executeQuery(statement)) {
      while (rows.next()) {}
    }
  }
}
