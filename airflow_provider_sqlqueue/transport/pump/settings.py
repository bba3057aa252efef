"""PumpSettings: how a message pump runs, declared once.

:class:`~.message_pump.MessagePump`, :meth:`Endpoint.start <..endpoint.Endpoint.start>`,
``SqlQueueHook.consume``, ``ConsumeMessagesOperator`` and ``sqlqueue consume`` all take these settings, as
one object or as keywords of the same names, and pass one ``PumpSettings`` on: a default, a check or a new
setting is written here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ...model.errors import ConfigurationError
from ..queue import TransactionMode
from ..queue.startup import DEFAULT_PURGE_BATCH_SIZE, check_purge_batch_size
from ..recoverability import CircuitBreakerSettings, CriticalErrorCallback
from .arguments import check_pump_arguments
from .strategy import (
    MAXIMUM_CONSECUTIVE_FAILURES,
    MINIMUM_CONSECUTIVE_SUCCESSES,
    SLOW_HANDLER_SECONDS,
    Strategy,
)

__all__ = ["PumpSettings"]


@dataclass(frozen=True)
class PumpSettings:
    """How a pump receives and handles messages. Every value is checked when the settings are made.

    :param max_concurrency: most receives in flight at once (the seeds' ``MaximumConcurrencyLevel``); each
        handles its messages one after another, so this is also the most handlers running at once.
    :param batch_size: most messages per receive transaction (default 1, one message per transaction). Above
        1, a receive takes up to that many, runs the handler on each in turn (a failing one is retried in
        place, then moved to the error queue), and commits once; a crash returns the whole batch.
    :param strategy: ``monitor`` (default), ``adaptive`` or ``fixed``.
    :param transaction_mode: the core's transaction mode (default ``sends_atomic_with_receive``).
    :param immediate_retries: attempts after the first before a message goes to the error queue (none
        in transaction mode ``none``, which has no transaction to put a message back).
    :param idle_delay: seconds to wait when the queue is empty (at least 0.1, default 1); above 10 s it
        logs a warning, as the reference's peek delay does.
    :param wake_up: ``auto`` (default): where the engine pushes notifications (PostgreSQL), an idle pump
        wakes as soon as a send commits, and the idle delay is only the fallback; ``poll``: the idle delay
        alone.
    :param circuit_breaker: the breaker's times (defaults 30 s to trigger, 1 s and 10 s back-off).
    :param on_critical_error: ``callback(message, error)`` when a breaker triggers (default: log it and
        keep trying).
    :param success_threshold: the adaptive strategy's ramp-up: a worker starts another after more than
        this many (5) messages in a row, as the reference's 2.1 receivers.
    :param failure_threshold: the adaptive strategy's ramp-down: a worker retires after this many (7) empty
        receives in a row, as the reference's 2.1 receivers.
    :param slow_handler_threshold: seconds after which a receive still running starts one more adaptive
        worker (5, the reference's), so a slow handler does not hold the queue up.
    :param stop_timeout: how long a stop waits for running handlers by default.
    :param inspect_on_start: look at the input queue's indexes and columns once when starting and log what
        could be better (default True; it never stops the start).
    :param purge_expired_on_start: delete the input queue's expired messages when starting, before the
        first receive (default False, as in the reference); a deadlock is a warning and the start goes on.
    :param purge_batch_size: rows per purge statement, each in its own transaction (default 10,000).
    """

    max_concurrency: int = 1
    batch_size: int = 1
    strategy: Strategy | str = Strategy.MONITOR
    transaction_mode: TransactionMode | str | None = None
    immediate_retries: int = 5
    idle_delay: float = 1.0
    wake_up: str = "auto"
    circuit_breaker: CircuitBreakerSettings | None = None
    on_critical_error: CriticalErrorCallback | None = None
    success_threshold: int = MINIMUM_CONSECUTIVE_SUCCESSES
    failure_threshold: int = MAXIMUM_CONSECUTIVE_FAILURES
    slow_handler_threshold: float = SLOW_HANDLER_SECONDS
    stop_timeout: float = 30.0
    inspect_on_start: bool = True
    purge_expired_on_start: bool = False
    purge_batch_size: int = DEFAULT_PURGE_BATCH_SIZE

    def __new__(cls, *args: Any, **settings: Any) -> PumpSettings:
        """``PumpSettings(batchsize=5)`` is refused with the names there are, as :meth:`of` refuses it."""
        cls.refuse_unknown(settings)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        strategy, mode = check_pump_arguments(
            max_concurrency=self.max_concurrency,
            batch_size=self.batch_size,
            strategy=self.strategy,
            transaction_mode=self.transaction_mode,
            immediate_retries=self.immediate_retries,
            idle_delay=self.idle_delay,
            wake_up=self.wake_up,
        )
        for switch in ("inspect_on_start", "purge_expired_on_start"):
            if not isinstance(getattr(self, switch), bool):
                raise ConfigurationError(f"{switch} must be True or False, not {getattr(self, switch)!r}")
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(self, "transaction_mode", mode)
        object.__setattr__(self, "idle_delay", float(self.idle_delay))
        object.__setattr__(self, "purge_batch_size", check_purge_batch_size(self.purge_batch_size))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in fields(cls))

    @classmethod
    def refuse_unknown(cls, settings: Mapping[str, Any]) -> None:
        """Raise :class:`ConfigurationError` naming every key of ``settings`` that is not a setting."""
        unknown = sorted(set(settings) - set(cls.names()))
        if unknown:
            raise ConfigurationError(
                f"unknown pump setting(s) {', '.join(unknown)}; the settings are: {', '.join(cls.names())}"
            )

    @classmethod
    def of(cls, settings: PumpSettings | Mapping[str, Any] | None = None, **options: Any) -> PumpSettings:
        """``settings`` (an object, a mapping of setting names, or None for the defaults) with ``options``
        over it. An unknown name is refused with the names there are, so a typo never runs as a default."""
        if isinstance(settings, PumpSettings):
            base, given = settings, dict(options)
        elif settings is None or isinstance(settings, Mapping):
            base, given = None, {**(settings or {}), **options}
        else:
            raise ConfigurationError(f"pump settings must be a PumpSettings or a mapping, not {settings!r}")
        cls.refuse_unknown(given)
        return cls(**given) if base is None else replace(base, **given)
