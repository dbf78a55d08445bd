package lakehouse.serving;

/** A login the service refused; its message names the user and the reason, never the secret offered. */
public final class LoginRefused extends SecurityException {
  public static final String PREFIX = "not authenticated: ";

  LoginRefused(String reason) {
    super(PREFIX + reason);
  }
}
