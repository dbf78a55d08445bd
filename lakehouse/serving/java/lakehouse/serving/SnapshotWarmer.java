package lakehouse.serving;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Future;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.LogSegment;
import org.apache.spark.sql.delta.Snapshot;
import scala.Option;
import scala.runtime.BoxedUnit;

/**
 * Builds a served table's newest snapshot off the queries' path, and only then lets queries see it.
 *
 * <p>A query on a Delta table reads its latest snapshot, and the first reader of a new version
 * builds that version's state (a Spark job over the checkpoint and the commits since: the file
 * list, sizes, protocol). Delta's staleness bound lets a query read the snapshot it already has
 * while a background update installs the next one, but it installs that snapshot unbuilt, and the
 * next query builds it. The stream commits every trigger, so on a busy service nearly every query
 * met a new version and waited for its build (docs/design.md, "Serving").
 *
 * <p>The service's warmer thread calls {@link #warm} for each table the serving views read: it
 * lists the log, builds the newest version's state, and installs it under Delta's snapshot lock
 * unless a newer one was installed meanwhile (a commit made in this JVM, or a query's own update).
 * Queries within the staleness bound then find a built snapshot. They no longer start Delta's
 * background update themselves ({@link #warm} marks one as running that never ends): the warmer is
 * that update. A query that finds the table's snapshot older than the bound (the warmer stopped, or
 * is behind) updates it itself, as Delta does without a warmer: the bound holds either way.
 *
 * <p>The service warms while people query (lakehouse.serving.snapshots): an idle service builds
 * nothing, and the first query after a pause may pay one build, as without a warmer.
 *
 * <p>It reaches into Delta's snapshot management ({@code createLogSegment}, {@code
 * getUpdatedSnapshot}, {@code installSnapshot}, {@code asyncUpdateTask}), public in bytecode but
 * not Delta's API; tests/test_snapshot_warmer.py proves its effect on the pinned Delta version.
 */
public final class SnapshotWarmer {
  /** Stands for Delta's background update: never done, so queries never start another. */
  private static final Future<BoxedUnit> WARMER_RUNNING = new CompletableFuture<>();

  private SnapshotWarmer() {}

  /**
   * Brings the table's served snapshot to its newest version, built before it is installed.
   *
   * @return the version queries read after the call
   */
  public static long warm(SparkSession spark, String location) throws InterruptedException {
    // Delta reads its confs from the thread's active session, which the warmer's thread has none of.
    SparkSession.setActiveSession(spark);
    DeltaLog log = DeltaLog.forTable(spark, location);
    log.asyncUpdateTask_$eq(WARMER_RUNNING);
    long listedAt = log.clock().getTimeMillis();
    Snapshot served = log.unsafeVolatileSnapshot();
    Option<LogSegment> newest =
        log.createLogSegment(
            log.createLogSegment$default$1(),
            Option.apply(served.logSegment().checkpointProvider()),
            served.tableCommitCoordinatorClientOpt(),
            Option.empty(),
            Option.empty());
    Snapshot next = log.getUpdatedSnapshot(
        Option.apply(served), newest, served.tableCommitCoordinatorClientOpt(), Option.empty(), true);
    if (next != served) {
      next.computedState();
      // The planner's file listing reads the state's statistics from a cache of their own.
      next.withStats().count();
    }
    return install(log, served, next, listedAt);
  }

  /**
   * Installs {@code next} unless the served snapshot moved past {@code served} meanwhile; the
   * same snapshot is installed again to say it was current at {@code listedAt}.
   */
  private static long install(DeltaLog log, Snapshot served, Snapshot next, long listedAt)
      throws InterruptedException {
    ReentrantLock lock = log.snapshotLock();
    lock.lockInterruptibly();
    try {
      if (log.unsafeVolatileSnapshot() == served) {
        log.installSnapshot(next, listedAt);
      } else if (next != served) {
        next.uncache();
      }
      return log.unsafeVolatileSnapshot().version();
    } finally {
      lock.unlock();
    }
  }
}
