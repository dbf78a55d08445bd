"""Operations without a JVM: Airflow's decisions and DAG support, stream health, small ops tables.

Nothing in this package imports pyspark (an import-linter contract in pyproject.toml checks it):
the DAG processor and Airflow's callbacks import it at parse time."""
