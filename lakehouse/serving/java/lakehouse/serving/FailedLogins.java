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
 *
 * <p>A hash is claimed before it starts ({@link #claim}) and settled when it ends ({@link #settled}),
 * so guesses sent in parallel share the same allowance as guesses sent one after another: a hash
 * under way counts as a failure until it is settled, and past the free failures only one runs at a
 * time. A secret the service has already verified is not held back and clears the failures in a
 * row ({@link #verifiedAgain}): an analyst already at work goes on while their name is under attack,
 * and each of their requests lets the guesser {@link #FREE} more hashes at most.
 */
final class FailedLogins {
  static final int FREE = 10;
  static final long LONGEST_WAIT_MILLIS = 60_000;
  // Beyond this many names, those whose wait is over are forgotten: random names cannot fill the heap.
  private static final int MOST_NAMES = 10_000;

  /** One name's failures in a row, the hashes under way for it, and when the last failure was. */
  private static final class Tries {
    long inARow;
    int underWay;
    long lastFailedAt;
  }

  private final Map<String, Tries> tries = new ConcurrentHashMap<>();

  /**
   * Claims the right to hash one secret of {@code user}, or refuses with the wait left. Every claim
   * must be settled, once.
   */
  void claim(String user) {
    long now = System.currentTimeMillis();
    if (tries.size() >= MOST_NAMES) {
      tries.keySet().forEach(name -> tries.computeIfPresent(name, (key, seen) -> forgettable(seen, now) ? null : seen));
    }
    long[] left = {0};
    tries.compute(user, (name, seen) -> {
      Tries current = seen == null ? new Tries() : seen;
      left[0] = waitLeft(current, now);
      if (left[0] <= 0) {
        current.underWay += 1;
      }
      return current;
    });
    if (left[0] > 0) {
      throw new LoginRefused(
          "too many failed logins for user " + user + " in a row: the next is checked in " + ((left[0] + 999) / 1000) + " s");
    }
  }

  /** Ends a claim: the secret matched, or it did not (a hash that failed to run counts as not). */
  void settled(String user, boolean matched) {
    long now = System.currentTimeMillis();
    tries.computeIfPresent(user, (name, seen) -> {
      seen.underWay = Math.max(0, seen.underWay - 1);
      if (matched) {
        seen.inARow = 0;
        return seen.underWay == 0 ? null : seen;
      }
      seen.inARow += 1;
      seen.lastFailedAt = now;
      return seen;
    });
  }

  /** A secret verified earlier came again: the user is who they say, so their failures in a row end. */
  void verifiedAgain(String user) {
    tries.computeIfPresent(user, (name, seen) -> {
      seen.inARow = 0;
      return seen.underWay == 0 ? null : seen;
    });
  }

  /** Milliseconds before a secret of this name may be hashed; 0 or less when one may be now. */
  private static long waitLeft(Tries seen, long now) {
    long counted = seen.inARow + seen.underWay;
    if (counted < FREE) {
      return 0;
    }
    if (seen.underWay > 0) {
      // The hash under way will fail or not; either way the next may start only after it.
      return waitAfter(counted);
    }
    return seen.lastFailedAt + waitAfter(seen.inARow) - now;
  }

  private static boolean forgettable(Tries seen, long now) {
    return seen.underWay == 0 && seen.lastFailedAt + LONGEST_WAIT_MILLIS < now;
  }

  private static long waitAfter(long inARow) {
    long doublings = Math.min(Math.max(inARow - FREE, 0), 16);
    return Math.min(1000L << doublings, LONGEST_WAIT_MILLIS);
  }
}
