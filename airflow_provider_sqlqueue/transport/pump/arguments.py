"""The checks of a pump's arguments: each wrong value gets an error naming what it must be."""

from __future__ import annotations

import logging
import threading

from ...model.errors import ConfigurationError
from ..queue import TransactionMode
from ..wakeup import WAKE_UP_MODES
from .receive import MAX_BATCH_SIZE
from .strategy import Strategy

__all__ = ["MAX_CONCURRENCY", "MAX_IDLE_DELAY", "MIN_IDLE_DELAY", "check_pump_arguments"]

# The log lines keep the name they had before the split: airflow_provider_sqlqueue.transport.pump.
log = logging.getLogger(__package__)

MIN_IDLE_DELAY = 0.1
MAX_IDLE_DELAY = 10.0
MAX_CONCURRENCY = 1000


def check_pump_arguments(
    *,
    max_concurrency: object,
    batch_size: object,
    strategy: object,
    transaction_mode: object,
    immediate_retries: object,
    idle_delay: object,
    wake_up: object,
) -> tuple[Strategy, TransactionMode]:
    """Refuse what a pump cannot run with; return the strategy and transaction mode by value."""
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise ConfigurationError(f"max_concurrency must be an int, not {max_concurrency!r}")
    if not 1 <= max_concurrency <= MAX_CONCURRENCY:
        raise ConfigurationError(f"max_concurrency must be 1 to {MAX_CONCURRENCY}, not {max_concurrency}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ConfigurationError(f"batch_size must be an int, not {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ConfigurationError(f"batch_size must be 1 to {MAX_BATCH_SIZE}, not {batch_size}")
    try:
        chosen_strategy = Strategy(strategy)
    except ValueError:
        names = ", ".join(s.value for s in Strategy)
        raise ConfigurationError(f"strategy must be one of {names}, not {strategy!r}") from None
    try:
        mode = TransactionMode(transaction_mode or TransactionMode.SENDS_ATOMIC_WITH_RECEIVE)
    except ValueError:
        modes = ", ".join(m.value for m in TransactionMode)
        raise ConfigurationError(
            f"transaction_mode must be one of {modes}, not {transaction_mode!r}"
        ) from None
    if isinstance(immediate_retries, bool) or not isinstance(immediate_retries, int) or immediate_retries < 0:
        raise ConfigurationError(f"immediate_retries must be an int >= 0, not {immediate_retries!r}")
    if isinstance(idle_delay, bool) or not isinstance(idle_delay, int | float):
        raise ConfigurationError(f"idle_delay must be seconds, not {idle_delay!r}")
    if not idle_delay >= MIN_IDLE_DELAY:  # also refuses NaN
        raise ConfigurationError(
            f"idle_delay must be at least {MIN_IDLE_DELAY} seconds (recommended up to {MAX_IDLE_DELAY}), "
            f"not {idle_delay}"
        )
    if idle_delay > threading.TIMEOUT_MAX:
        raise ConfigurationError(
            f"idle_delay must be at most {threading.TIMEOUT_MAX:g} seconds (recommended up to "
            f"{MAX_IDLE_DELAY}), not {idle_delay}"
        )
    if idle_delay > MAX_IDLE_DELAY:  # the reference's peek delay warns above 10 s, it does not refuse
        log.warning(
            "idle_delay of %g s is above the recommended %g to %g s: an idle pump notices new messages "
            "that late",
            idle_delay, MIN_IDLE_DELAY, MAX_IDLE_DELAY,
        )  # fmt: skip
    if wake_up not in WAKE_UP_MODES:
        raise ConfigurationError(f"wake_up must be one of {', '.join(WAKE_UP_MODES)}, not {wake_up!r}")
    return chosen_strategy, mode
