package lakehouse.storage;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system for its FileContext, checksums included, without a process started per
 * file.
 *
 * <p>Without Hadoop's native library (pyspark ships none), the local file system runs {@code chmod}
 * for every file it creates and {@code readlink} twice for every rename: a Delta commit, a streaming
 * checkpoint file or a checksum file each start processes from the JVM. A profile of the tests'
 * session counted 8,869 of them in 17 minutes. Java's own file API does the same work in the JVM.
 * Everything else is Hadoop's code: the rename that refuses to replace a file (Delta's commits rely
 * on it), the checksum files, and real symbolic links, which still go through Hadoop's path.
 */
public final class ForkFreeLocalFileSystem {
  private ForkFreeLocalFileSystem() {}

  /** The file system under the checksums: permissions and link checks through java.nio. */
  private static final class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path path, FsPermission permission) throws IOException {
      if (permission.getStickyBit()) {
        super.setPermission(path, permission);
        return;
      }
      Files.setPosixFilePermissions(
          pathToFile(path).toPath(), PosixFilePermissions.fromString(permission.toString()));
    }

    /**
     * Hadoop asks {@code readlink} whether the path is a link, and reads the file's status either
     * way; for a path that is not a link, that status is the answer.
     */
    @Override
    public FileStatus getFileLinkStatus(Path path) throws IOException {
      if (Files.isSymbolicLink(pathToFile(path).toPath())) {
        return super.getFileLinkStatus(path);
      }
      return getFileStatus(path);
    }
  }

  /**
   * What Hadoop's FileContext gets for {@code file:} (Delta's commits and Spark's checkpoints go
   * through it). Like Hadoop's own, it serves the one local file system whatever URI it is asked for.
   */
  public static final class Context extends ChecksumFs {
    public Context(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new RawContext(conf));
    }
  }

  /** FileContext's view of {@link Raw}. */
  private static final class RawContext extends DelegateToFileSystem {
    RawContext(Configuration conf) throws IOException, URISyntaxException {
      super(FsConstants.LOCAL_FS_URI, new Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public FsServerDefaults getServerDefaults(Path path) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String name) {
      return true;
    }
  }
}
