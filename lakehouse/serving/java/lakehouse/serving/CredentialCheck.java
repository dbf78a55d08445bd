package lakehouse.serving;

/**
 * One way the service checks who a person is, given a name and a secret (a JDBC password or a
 * Spark Connect bearer token). {@link UsersFile} is the one there is; a directory (LDAP) would be
 * another, tried after it by {@link Logins}.
 */
public interface CredentialCheck {
  /** The person's role when {@code secret} is {@code user}'s, or null when this check does not know them so. */
  String roleOf(String user, String secret);

  /** The role {@code user} has now, or null when this check no longer knows them (removed). */
  String currentRole(String user);
}
