"""The operator of every Spark job task: spark-submit, but a job that exits with a check's verdict
(:attr:`ExitCode.CHECK_FAILED`: an audit's unexplained difference, say) fails without retries.

Retries are for faults that may pass (a lost executor, a store that did not answer); a verdict on
the data is the same on every try, and retrying it would only rerun the job and hold back the
failure's alert by the retry delay. Imported when a DAG is built, never at module level of the DAG
support (the provider's import is not cheap).
"""

from __future__ import annotations

import re

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from lakehouse.errors import ExitCode

# How SparkSubmitHook.submit reports spark-submit's exit code when it is not 0.
SUBMIT_EXIT_CODE = re.compile(r"Error code is: (\d+)")


def job_failed(command: str, code: int) -> AirflowException:
    """The exception that fails a task whose job exited with ``code``: no retries for a verdict."""
    message = f"{command} failed with exit code {code}; see the log above"
    if code == ExitCode.CHECK_FAILED:
        return AirflowFailException(f"{message} (a check's verdict: not retried)")
    return AirflowException(message)


class SparkJobOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` whose job's check verdict is not retried (see the module's doc)."""

    def execute(self, context) -> None:
        try:
            super().execute(context)
        except AirflowException as failed:
            exit_code = SUBMIT_EXIT_CODE.search(str(failed))
            if exit_code is None or int(exit_code.group(1)) != ExitCode.CHECK_FAILED:
                raise
            raise job_failed(f"spark-submit {self.application}", ExitCode.CHECK_FAILED) from failed
