"""The pump's strategies by the reference's rules, and transaction mode ``none``.

The adaptive strategy's parts (the ramp-up controller, the back-off, the slow-handler watch) are driven
directly with scripted receives and a clock the test moves; each rule also has one run of the pump on the
real engines. Nothing here waits on wall time beyond a generous deadline for something to happen.
"""

from __future__ import annotations

import logging
import math

import pytest

from airflow_provider_sqlqueue.transport import ConfigurationError, MessagePump, Transport

PUMP_LOGGER = "airflow_provider_sqlqueue.transport.pump"


# ---- idle_delay -------------------------------------------------------------------------------------
def test_an_idle_delay_above_10_s_warns_and_is_kept(target, transport: Transport, caplog) -> None:
    queue = transport.queue("orders")
    with caplog.at_level(logging.WARNING, logger=PUMP_LOGGER):
        pump = MessagePump(queue, print, idle_delay=30)
    assert pump.idle_delay == 30.0
    assert "idle_delay of 30 s is above the recommended 0.1 to 10 s" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=PUMP_LOGGER):
        MessagePump(queue, print, idle_delay=10)
    assert caplog.text == ""
    for refused in (0.05, 0, -1, math.inf, math.nan):
        with pytest.raises(ConfigurationError, match="idle_delay"):
            MessagePump(queue, print, idle_delay=refused)
