package lakehouse.storage;

import io.delta.storage.HadoopFileSystemLogStore;
import io.delta.storage.internal.S3LogStoreUtil;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;
import org.apache.hadoop.fs.s3a.S3AFileSystem;

/**
 * Delta commits to S3 as delta-rs makes them: the commit file N.json is one PUT with
 * {@code If-None-Match: *}, which the store refuses (412) when N.json exists. Of two writers of
 * version N, whatever their library, exactly one PUT succeeds; the other gets Delta's
 * FileAlreadyExistsException, and Delta checks its conflicts and retries at N+1, as on a local disk.
 *
 * <p>Delta's S3 log stores cannot give that beside delta-rs: S3SingleDriverLogStore checks for
 * N.json and then PUTs it unconditionally, and S3DynamoDBLogStore claims N in DynamoDB, which
 * delta-rs 1.x does not read, before an unconditional copy to N.json. hadoop-aws 3.4.2 sends the
 * header for a create built with {@code fs.option.create.conditional.overwrite} (HADOOP-19256).
 */
public class S3ConditionalLogStore extends HadoopFileSystemLogStore {
  /** Hadoop's create option for a PUT that fails when the object exists. */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  public S3ConditionalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (overwrite) { // _last_checkpoint: Delta replaces it on purpose
      try (FSDataOutputStream out = fs.create(path, true)) {
        writeLines(out, actions);
      }
      return;
    }
    try {
      // must(): a file system that cannot send the condition refuses to build the stream,
      // rather than writing unconditionally.
      FSDataOutputStreamBuilder<?, ?> create = fs.createFile(path).overwrite(false);
      create.must(CONDITIONAL_CREATE, true);
      try (FSDataOutputStream out = (FSDataOutputStream) create.build()) {
        writeLines(out, actions);
      }
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException | RemoteFileChangedException taken) {
      // The existence check before the PUT, or the store's 412 on it: another writer has N.
      java.nio.file.FileAlreadyExistsException conflict = new java.nio.file.FileAlreadyExistsException(path.toString());
      conflict.initCause(taken);
      throw conflict;
    }
  }

  /**
   * The log's entries from {@code path} on, asked of S3 from there (ListObjectsV2's start-after)
   * rather than listed whole and then filtered. Hadoop's listStatus pages through every entry the
   * log keeps, 5,000 a request (S3A's fs.s3a.paging.maximum), at each snapshot update, and a log
   * keeps its entries for delta.logRetentionDuration (30 days by default): a table committed to
   * every few seconds holds hundreds of thousands. Delta's own S3 store lists so behind delta.enableFastS3AListFrom
   * (S3LogStoreUtil, used here), and delta-rs does too, from its last checkpoint.
   */
  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (!(fs instanceof S3AFileSystem)) {
      return super.listFrom(path, hadoopConf);
    }
    Path from = fs.makeQualified(path);
    Path log = from.getParent();
    FileStatus[] listed = S3LogStoreUtil.s3ListFromArray(fs, from, log);
    // Delta reads a missing log as a table that does not exist yet. Asked only when nothing is
    // listed: a check before every listing was a LIST request of its own, two a read.
    if (listed.length == 0 && !fs.exists(log)) {
      throw new FileNotFoundException("No such file or directory: " + log);
    }
    String first = from.getName();
    return Arrays.stream(listed)
        .filter(status -> status.getPath().getName().compareTo(first) >= 0)
        .sorted(Comparator.comparing(status -> status.getPath().getName()))
        .iterator();
  }

  private static void writeLines(FSDataOutputStream out, Iterator<String> actions) throws IOException {
    while (actions.hasNext()) {
      out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false; // an S3 object appears whole when its PUT completes
  }
}
