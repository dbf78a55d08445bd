package org.slf4j.impl;

import org.slf4j.ILoggerFactory;
import org.slf4j.LoggerFactory;

/**
 * The SLF4J 1.x binding that the AWS SDK's bundle (the s3a file system's SDK) asks for by this
 * name, handing it the JVM's own SLF4J 2 logging: Log4j 2, at the levels of
 * lakehouse/storage/log4j2.properties.
 *
 * <p>The bundle carries its own SLF4J 1.7, shaded, whose binder looks for {@code
 * org.slf4j.impl.StaticLoggerBinder} to pass its logging on. SLF4J 2 bindings such as Spark's
 * Log4j 2 one are found as providers instead and bring no such class, so without this one the
 * SDK's first logger printed three "SLF4J: Failed to load class" lines on every S3 driver's
 * standard error and dropped the SDK's logs. SLF4J 2 itself looks at this class only when it finds
 * no provider, which Spark's class path always holds.
 */
public final class StaticLoggerBinder {
  private static final StaticLoggerBinder SINGLETON = new StaticLoggerBinder();

  private StaticLoggerBinder() {}

  public static StaticLoggerBinder getSingleton() {
    return SINGLETON;
  }

  public ILoggerFactory getLoggerFactory() {
    return LoggerFactory.getILoggerFactory();
  }

  public String getLoggerFactoryClassStr() {
    return getLoggerFactory().getClass().getName();
  }
}
