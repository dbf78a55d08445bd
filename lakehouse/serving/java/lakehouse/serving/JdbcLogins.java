package lakehouse.serving;

import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The Thrift (JDBC/ODBC) server's password check: HiveServer2's CUSTOM authentication
 * ({@code hive.server2.authentication=CUSTOM}, {@code hive.server2.custom.authentication.class} this
 * class), asking {@link Logins}. HiveServer2 makes one per login, so it keeps nothing itself.
 *
 * <p>The login runs on the connection's own thread, which then serves its requests: the name it
 * authenticated is kept there, so that the server opens a session only for that name ({@link
 * ReadOnlyThriftServer}): SASL PLAIN lets a client ask to act as another name than the one it
 * proved, and HiveServer2 grants it.
 */
public final class JdbcLogins implements PasswdAuthenticationProvider {
  private static final ThreadLocal<String> AUTHENTICATED = new ThreadLocal<>();

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    AUTHENTICATED.remove();
    long started = System.currentTimeMillis();
    try {
      Logins.role(user, password);
    } catch (LoginRefused refused) {
      QueryLog.record(user, QueryLog.JDBC, "", started, 0, refused.getMessage());
      throw new AuthenticationException(refused.getMessage());
    }
    AUTHENTICATED.set(user);
  }

  /** The name this connection's login proved, or null. */
  static String authenticated() {
    return AUTHENTICATED.get();
  }
}
