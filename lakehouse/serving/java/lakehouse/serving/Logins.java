package lakehouse.serving;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Who may use the service's endpoints: the people of the users file (and any other {@link
 * CredentialCheck} added later), and the platform's own jobs, which log in under one reserved name
 * with the write token the driver makes at each start. Both endpoints ask here: the Thrift server
 * through {@link JdbcLogins}, Spark Connect through {@link ConnectLogins}.
 */
public final class Logins {
  private static volatile List<CredentialCheck> checks = List.of();
  private static volatile String platformUser = "";
  private static volatile byte[] platformToken = new byte[0];
  private static final Map<String, String> ROLES = new ConcurrentHashMap<>();

  /** The role that reads the query log (lakehouse/vocabulary.py, Role.OPERATOR), and the jobs'. */
  public static final String OPERATOR = "operator";
  public static final String PLATFORM = "platform";

  private Logins() {}

  /**
   * Set by the service's driver at start, before either endpoint opens.
   *
   * @param usersFile the platform's users file (names, roles, salted slow hashes)
   * @param jobsUser the name the platform's jobs log in under
   * @param writeToken the jobs' secret, made at this start
   */
  public static void configure(String usersFile, String jobsUser, String writeToken) {
    checks = List.of(new UsersFile(Path.of(usersFile)));
    platformUser = jobsUser;
    platformToken = writeToken.getBytes(StandardCharsets.UTF_8);
  }

  /** The role of {@code user} when {@code secret} is theirs; a {@link LoginRefused} otherwise. */
  public static String role(String user, String secret) {
    if (user == null || user.isBlank()) {
      throw new LoginRefused("no user name given; log in with a user of `lakehouse users list` and its password");
    }
    if (secret == null || secret.isEmpty()) {
      throw new LoginRefused("no password or token given for user " + user);
    }
    if (user.equals(platformUser)) {
      if (platformToken.length > 0 && MessageDigest.isEqual(platformToken, secret.getBytes(StandardCharsets.UTF_8))) {
        return remember(user, PLATFORM);
      }
    } else {
      for (CredentialCheck check : checks) {
        String role = check.roleOf(user, secret);
        if (role != null) {
          return remember(user, role);
        }
      }
    }
    // One answer for an unknown user and a wrong secret: a refusal does not say which names exist.
    throw new LoginRefused("unknown user or wrong password/token for user " + user);
  }

  private static String remember(String user, String role) {
    ROLES.put(user, role);
    return role;
  }

  /**
   * The role {@code user} has now, by the users file as it is now; a {@link LoginRefused} once they
   * are removed. A session opened before its user was removed must not outlive the removal: the
   * Thrift server asks here before each statement (a Connect client's every request logs in again).
   */
  static String stillAllowed(String user) {
    if (user.equals(platformUser)) {
      return PLATFORM;
    }
    for (CredentialCheck check : checks) {
      String role = check.currentRole(user);
      if (role != null) {
        return remember(user, role);
      }
    }
    ROLES.remove(user);
    throw new LoginRefused("user " + user + " was removed: the session ends; log in with a user of `lakehouse users list`");
  }

  /** The role {@code user} last logged in with, or null: a session's user logged in to have one. */
  static String loggedInRole(String user) {
    return user == null ? null : ROLES.get(user);
  }
}
