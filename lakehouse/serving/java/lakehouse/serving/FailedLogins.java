package lakehouse.serving;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Failed logins per user name, and the wait they impose. Checking a secret costs a slow hash (a few
 * hundred milliseconds of a core, by design): unchecked, a client sending wrong secrets as fast as
 * it can would keep the service's cores hashing, and every analyst would wait. After {@link #FREE}
 * failures in a row, a name's next secret is not checked until a wait has passed, from 1 s doubling
 * to {@link #LONGEST_WAIT_MILLIS}; a try within the wait is refused at once, unhashed. A success
 * clears the name. Every name counts, known or not, so that the refusal says nothing of who exists.
 * A secret the service has already verified is not held back, and counts as a success (UsersFile
 * remembers it): an analyst already at work goes on while their name is under attack, and each of
 * their requests lets the guesser {@link #FREE} more hashes at most.
 */
final class FailedLogins {
  static final int FREE = 10;
  static final long LONGEST_WAIT_MILLIS = 60_000;
  // Beyond this many names, those whose wait is over are forgotten: random names cannot fill the heap.
  private static final int MOST_NAMES = 10_000;

  /** Per name: failures in a row, and when the last one was. */
  private final Map<String, long[]> failures = new ConcurrentHashMap<>();

  /** Refuses, with the wait left, a name whose secret may not be checked yet. */
  void check(String user) {
    long[] seen = failures.get(user);
    if (seen == null) {
      return;
    }
    long left;
    synchronized (seen) {
      left = seen[0] < FREE ? 0 : seen[1] + waitAfter(seen[0]) - System.currentTimeMillis();
    }
    if (left > 0) {
      throw new LoginRefused(
          "too many failed logins for user " + user + " in a row: the next is checked in " + ((left + 999) / 1000) + " s");
    }
  }

  void failed(String user) {
    if (failures.size() >= MOST_NAMES) {
      long now = System.currentTimeMillis();
      failures.values().removeIf(seen -> seen[1] + LONGEST_WAIT_MILLIS < now);
    }
    long[] seen = failures.computeIfAbsent(user, name -> new long[2]);
    synchronized (seen) {
      seen[0] += 1;
      seen[1] = System.currentTimeMillis();
    }
  }

  void succeeded(String user) {
    failures.remove(user);
  }

  private static long waitAfter(long inARow) {
    long doublings = Math.min(inARow - FREE, 16);
    return Math.min(1000L << doublings, LONGEST_WAIT_MILLIS);
  }
}
