"""Where a micro-batch's time goes: wall-clock seconds per stage (``BatchStage``), measured on the
driver around the calls that run each stage's Spark jobs and commits.

Cheap by design: a ``time.perf_counter`` pair per stage, no Spark listener and no extra job. The
figures land in the batch's ``ops.stream_progress`` row (``stage_ms``) beside its ``duration_ms``,
which they share a clock with: both end when the row is built, so the row's own append is in
neither (Spark's ``addBatch`` duration less ``duration_ms`` is that append).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator

from lakehouse.vocabulary import BatchStage


@dataclasses.dataclass
class StageTimes:
    """Seconds spent in each stage of one micro-batch; a stage entered twice (a batch whose files
    were still being written parses again) adds up."""

    seconds: dict[BatchStage, float] = dataclasses.field(default_factory=dict)

    @contextlib.contextmanager
    def stage(self, stage: BatchStage) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - began

    def as_ms(self) -> dict[str, int]:
        """Whole milliseconds by stage name, in the stages' order; stages the batch skipped (no
        quarantined line, no pane) are left out."""
        return {str(stage): round(self.seconds[stage] * 1000) for stage in BatchStage if stage in self.seconds}
