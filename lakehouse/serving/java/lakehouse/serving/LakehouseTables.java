package lakehouse.serving;

import java.net.URI;
import java.util.HashSet;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.ExternalCatalog;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Which Delta tables a read-only session reads: the lakehouse's, those its catalog holds.
 *
 * <p>A table read by its name is one: only the platform registers tables. A table read by its path
 * ({@code delta.`/path`} where SQL on files is on, {@code spark.read.format("delta").load(path)},
 * {@code table_changes_by_path}, {@code DESCRIBE HISTORY '/path'}) is one when that path is the
 * location of a table in the catalog; any other Delta table there is one the service's OS user can
 * read but the lakehouse does not hold, and is refused. The catalog's locations are listed only
 * for a read by path, once per judged plan.
 *
 * <p>Delta's classes are not on the class path this JAR is compiled against: what a Delta relation
 * or table reads is asked by name ({@code catalogTable}, {@code deltaLog().dataPath()}).
 */
final class LakehouseTables {
  private static final String BY_NAME = "read the lakehouse's tables by name (SHOW TABLES lists them)";

  private final SparkSession session;
  private Set<String> locations;

  LakehouseTables(SparkSession session) {
    this.session = session;
  }

  /** The session whose plan is judged. */
  SparkSession session() {
    return session;
  }

  /** Throws unless a Delta relation (files or the change feed) reads a table of the lakehouse. */
  void check(LogicalRelation relation) {
    if (relation.catalogTable().isDefined()) {
      return;
    }
    Object source = relation.relation();
    if (source instanceof HadoopFsRelation files) {
      for (Iterator<Path> it = files.location().rootPaths().iterator(); it.hasNext(); ) {
        checkPath(it.next());
      }
    } else if (!readByName(source)) {
      checkPath(dataPath(source));
    }
  }

  /** Throws unless a Delta table (of a relation, or one a DESCRIBE names) is one of the lakehouse. */
  void check(Table table) {
    if (!readByName(table)) {
      checkPath(dataPath(table));
    }
  }

  /**
   * Throws unless every Delta table a describing statement names is one of the lakehouse: DESCRIBE
   * HISTORY and DETAIL, SHOW COLUMNS and DESCRIBE TABLE read a table's log, its schema and history.
   */
  void checkDescribed(LogicalPlan plan) {
    for (Iterator<Object> it = plan.productIterator(); it.hasNext(); ) {
      Object field = it.next();
      if (field instanceof Table table && ReadOnlyPlans.isDelta(table)) {
        check(table);
      }
    }
    if (plan.getClass().getSimpleName().startsWith("ResolvedPathBased")) {
      throw ReadOnlyPlans.refused("a path that holds no Delta table is no table of the lakehouse; " + BY_NAME);
    }
    for (Iterator<LogicalPlan> it = plan.children().iterator(); it.hasNext(); ) {
      checkDescribed(it.next());
    }
  }

  private void checkPath(Path path) {
    if (!lakehouseLocations().contains(spelled(path))) {
      throw ReadOnlyPlans.refused(path + " is not the location of a table of the lakehouse; " + BY_NAME);
    }
  }

  /** Every location of a table in the session's catalog, listed once per judged plan. */
  private Set<String> lakehouseLocations() {
    if (locations == null) {
      locations = new HashSet<>();
      ExternalCatalog catalog = session.sharedState().externalCatalog();
      for (String schema : CollectionConverters.asJava(catalog.listDatabases())) {
        for (CatalogTable table : CollectionConverters.asJava(catalog.getTablesByName(schema, catalog.listTables(schema)))) {
          Option<URI> location = table.storage().locationUri();
          if (location.isDefined()) {
            locations.add(spelled(new Path(location.get())));
          }
        }
      }
    }
    return locations;
  }

  /** One spelling of a location, as Hadoop qualifies it ({@code file:/...}, {@code s3a://bucket/...}). */
  private static String spelled(Path path) {
    URI uri = path.toUri().normalize();
    return new Path(uri.getScheme(), uri.getAuthority(), uri.getPath().replaceAll("(.)/+$", "$1")).toString();
  }

  /** Whether Delta read this relation or table through a catalog table (by its name). */
  private static boolean readByName(Object delta) {
    for (String name : new String[] {"catalogTable", "catalogTableOpt"}) {
      try {
        return ((Option<?>) delta.getClass().getMethod(name).invoke(delta)).isDefined();
      } catch (ReflectiveOperationException notThisOne) {
        // the other name, or neither: a path then
      }
    }
    return false;
  }

  /** The root of the Delta table a relation or table reads. */
  private static Path dataPath(Object delta) {
    try {
      Object log = delta.getClass().getMethod("deltaLog").invoke(delta);
      return (Path) log.getClass().getMethod("dataPath").invoke(log);
    } catch (ReflectiveOperationException | ClassCastException unknown) {
      throw ReadOnlyPlans.refused(delta.getClass().getSimpleName() + " reads a path the rule cannot see; " + BY_NAME);
    }
  }
}
