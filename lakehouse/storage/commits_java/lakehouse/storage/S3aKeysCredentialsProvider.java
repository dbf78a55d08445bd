package lakehouse.storage;

import com.amazonaws.auth.AWSCredentials;
import com.amazonaws.auth.AWSCredentialsProvider;
import com.amazonaws.auth.BasicAWSCredentials;
import org.apache.hadoop.conf.Configuration;

/**
 * The access key and secret of Hadoop's s3a file system (fs.s3a.access.key, fs.s3a.secret.key), for
 * the DynamoDB client of S3DynamoDBLogStore: a session's keys travel in its configuration, not in the
 * process's environment that AWS's default chain reads. S3DynamoDBLogStore builds it with the
 * Hadoop configuration (its constructor taking one).
 */
public class S3aKeysCredentialsProvider implements AWSCredentialsProvider {
    private final AWSCredentials credentials;

    public S3aKeysCredentialsProvider(Configuration conf) {
        String key = conf.get("fs.s3a.access.key");
        String secret = conf.get("fs.s3a.secret.key");
        if (key == null || secret == null) {
            throw new IllegalArgumentException("fs.s3a.access.key and fs.s3a.secret.key are not set");
        }
        this.credentials = new BasicAWSCredentials(key, secret);
    }

    @Override
    public AWSCredentials getCredentials() {
        return credentials;
    }

    @Override
    public void refresh() {}
}
