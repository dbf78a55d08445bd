package lakehouse.serving;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import javax.crypto.Mac;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

/**
 * The platform's users file ({@code lakehouse users add} writes it; lakehouse/serving/users.py says
 * its format): each user's role and a salted PBKDF2-HMAC-SHA256 hash of their secret, never the
 * secret. Read again whenever it changes, so a user added or removed counts from the next login.
 *
 * <p>A slow hash costs a few hundred milliseconds by design, and a Connect client presents its token
 * with every request: a secret once verified is remembered for this run, as an HMAC under a key that
 * lives only in this JVM's memory, against the hash it matched (a new secret or a removed user no
 * longer matches). Any other secret waits its turn in {@link FailedLogins} before it is hashed.
 */
final class UsersFile implements CredentialCheck {
  private static final String SCHEME = "pbkdf2_sha256";
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Path path;
  private final byte[] memoryKey = new byte[32];
  private final Map<String, String> verified = new ConcurrentHashMap<>();
  private final FailedLogins failures = new FailedLogins();
  private volatile FileTime readAt;
  private volatile Map<String, String[]> users = Map.of();

  UsersFile(Path path) {
    this.path = path;
    new SecureRandom().nextBytes(memoryKey);
  }

  @Override
  public String roleOf(String user, String secret) {
    String[] entry = current().get(user);
    String seen = remembered(user, secret);
    if (entry != null && entry[1].equals(verified.get(seen))) {
      failures.verifiedAgain(user);
      return entry[0];
    }
    failures.claim(user);
    boolean matched = false;
    try {
      matched = entry != null && matches(entry[1], secret);
    } finally {
      failures.settled(user, matched);
    }
    if (!matched) {
      return null;
    }
    verified.put(seen, entry[1]);
    return entry[0];
  }

  @Override
  public String currentRole(String user) {
    String[] entry = current().get(user);
    return entry == null ? null : entry[0];
  }

  /** Each user's role and hash, read again when the file's modification time moves. */
  private Map<String, String[]> current() {
    try {
      if (!Files.exists(path)) {
        return Map.of();
      }
      FileTime modified = Files.getLastModifiedTime(path);
      if (!modified.equals(readAt)) {
        Map<String, String[]> read = new HashMap<>();
        JsonNode all = JSON.readTree(Files.readString(path)).path("users");
        all.fieldNames().forEachRemaining(
            name -> read.put(name, new String[] {all.get(name).path("role").asText(), all.get(name).path("hash").asText()}));
        users = Map.copyOf(read);
        readAt = modified;
      }
      return users;
    } catch (IOException error) {
      throw new UncheckedIOException("cannot read the users file " + path, error);
    }
  }

  /** The key a verified secret is remembered under: no secret is kept, nor anything that could be searched for it. */
  private String remembered(String user, String secret) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(memoryKey, "HmacSHA256"));
      byte[] digest = mac.doFinal((user + "\0" + secret).getBytes(StandardCharsets.UTF_8));
      return Base64.getEncoder().encodeToString(digest);
    } catch (GeneralSecurityException error) {
      throw new IllegalStateException(error);
    }
  }

  /** Whether {@code secret} hashes to {@code stored}: "pbkdf2_sha256$iterations$salt$hash", base64. */
  static boolean matches(String stored, String secret) {
    String[] parts = stored.split("\\$");
    if (parts.length != 4 || !parts[0].equals(SCHEME)) {
      return false;
    }
    byte[] salt = Base64.getDecoder().decode(parts[2]);
    byte[] expected = Base64.getDecoder().decode(parts[3]);
    PBEKeySpec spec = new PBEKeySpec(secret.toCharArray(), salt, Integer.parseInt(parts[1]), expected.length * 8);
    try {
      byte[] offered = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
      return MessageDigest.isEqual(expected, offered);
    } catch (GeneralSecurityException error) {
      throw new IllegalStateException(error);
    } finally {
      spec.clearPassword();
    }
  }
}
