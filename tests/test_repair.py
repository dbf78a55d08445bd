"""A repair's request is checked before any Spark work: plain Python, no JVM."""

from __future__ import annotations

import re

import pytest

from lakehouse.audit.manual import Repair
from lakehouse.errors import LakehouseError


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (Repair("bronze", "TRUE", "why", "me", "x = 1"), "repair changes gold.<p>__speed or __batch, not 'bronze'"),
        (Repair("speed", " ", "why", "me", "x = 1"), "a repair needs --where"),
        (Repair("speed", "TRUE", "", "me", "x = 1"), "a repair needs --reason"),
        (Repair("speed", "TRUE", "why", "", "x = 1"), "a repair needs --by"),
        (Repair("batch", "TRUE; DROP TABLE x", "why", "me"), "a repair is one statement"),
    ],
)
def test_a_repair_without_what_why_or_who_or_with_two_statements_is_refused(request_, message):
    with pytest.raises(LakehouseError, match=re.escape(message)):
        request_.check()


def test_a_repair_is_one_update_or_delete_of_the_layers_table():
    update = Repair("speed", "bridge_id = 'b1'", "why", "me", "vehicles = 3")
    delete = Repair("batch", "bridge_id = 'b1'", "why", "me")
    assert update.statement("file:/w/gold/t") == "UPDATE delta.`file:/w/gold/t` SET vehicles = 3 WHERE bridge_id = 'b1'"
    assert delete.statement("file:/w/gold/t") == "DELETE FROM delta.`file:/w/gold/t` WHERE bridge_id = 'b1'"
