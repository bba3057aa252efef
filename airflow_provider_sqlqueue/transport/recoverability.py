"""What happens when things fail: the circuit breaker, per-message failure counts and failure headers.

- :class:`CircuitBreaker` follows the reference's ``RepeatedFailuresOverTimeCircuitBreaker``: the first
  failure arms it; while armed every failure is followed by a short delay (1 s), once triggered by a long
  one (10 s); if no success disarms it within the trigger time (30 s) it reports a critical error once.
- :class:`FailureStore` counts handler failures per native message Id across rollbacks (an LRU of 10,000
  entries, as the reference's ``FailureInfoStorage``), so a redelivered message knows its attempt number.
- :func:`failure_headers_text` sets the failure headers on the stored header text of a message moved to the
  error queue (:func:`failure_headers` on a header map).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from ..model.errors import ConfigurationError
from . import headers as h

__all__ = [
    "CircuitBreaker",
    "CircuitBreakerSettings",
    "CriticalErrorCallback",
    "FailureInfo",
    "FailureStore",
    "failure_entries",
    "failure_headers",
    "failure_headers_text",
    "log_critical_error",
]

log = logging.getLogger(__name__)

CriticalErrorCallback = Callable[[str, BaseException], None]
MAX_STACK_TRACE_CHARS = 16_000


def log_critical_error(message: str, error: BaseException) -> None:
    """The default critical-error action (as NServiceBus Core 7+): log it and keep trying."""
    log.critical("%s: %s. Still trying; stop the pump to give up.", message, error)


@dataclass(frozen=True)
class CircuitBreakerSettings:
    """The breaker's times in seconds (defaults: the reference's 30 s, 1 s and 10 s)."""

    time_to_trigger: float = 30.0
    armed_delay: float = 1.0
    triggered_delay: float = 10.0

    def __post_init__(self) -> None:
        for name in ("time_to_trigger", "armed_delay", "triggered_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigurationError(f"circuit breaker {name} must be a number >= 0, not {value!r}")


class CircuitBreaker:
    """Arms on the first failure, triggers after ``time_to_trigger`` without a success.

    :meth:`failure` returns how long to wait before trying again. The critical-error callback runs once
    per trigger, from a timer thread, exactly ``time_to_trigger`` after the first failure.
    """

    def __init__(
        self,
        name: str,
        settings: CircuitBreakerSettings | None = None,
        on_critical_error: CriticalErrorCallback | None = None,
    ) -> None:
        self.name = name
        self.settings = settings or CircuitBreakerSettings()
        self._on_critical_error = on_critical_error or log_critical_error
        self._lock = threading.Lock()
        self._armed_at: float | None = None
        self._triggered = False
        self._timer: threading.Timer | None = None
        self._last_error: BaseException | None = None
        self.failures = 0
        self.triggers = 0

    @property
    def armed(self) -> bool:
        return self._armed_at is not None

    @property
    def triggered(self) -> bool:
        return self._triggered

    def success(self) -> None:
        if self._armed_at is None:  # the common case: no lock taken
            return
        with self._lock:
            if self._armed_at is None:
                return
            was_triggered = self._triggered
            self._armed_at = None
            self._triggered = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        log.info("%s: recovered%s", self.name, " after triggering" if was_triggered else "")

    def failure(self, error: BaseException) -> float:
        """Count a failure; return the delay before the next attempt."""
        with self._lock:
            self.failures += 1
            self._last_error = error
            if self._armed_at is None:
                self._armed_at = time.monotonic()
                log.warning("%s: %s; circuit breaker armed", self.name, error)
                self._timer = threading.Timer(self.settings.time_to_trigger, self._trigger)
                self._timer.daemon = True
                self._timer.start()
            else:
                log.debug("%s: %s", self.name, error)
            return self.settings.triggered_delay if self._triggered else self.settings.armed_delay

    def _trigger(self) -> None:
        with self._lock:
            if self._armed_at is None or self._triggered:
                return
            self._triggered = True
            self.triggers += 1
            error = self._last_error
        log.error("%s: circuit breaker triggered", self.name)
        try:
            self._on_critical_error(self.name, error or RuntimeError(self.name))
        except Exception:
            log.exception("the critical-error callback of %s failed", self.name)

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


@dataclass
class FailureInfo:
    count: int
    error: BaseException
    stack_trace: str


class FailureStore:
    """Handler failures per native message Id, kept across rollbacks (least recently used dropped first)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[uuid.UUID, FailureInfo] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, message_id: uuid.UUID) -> FailureInfo | None:
        if not self._entries:  # what a pump asks before every handler call, mostly with nothing failed
            return None
        with self._lock:
            info = self._entries.get(message_id)
            if info is not None:
                self._entries.move_to_end(message_id)
            return info

    def record(self, message_id: uuid.UUID, error: BaseException) -> int:
        """Count one more failure of the message; return its failures so far."""
        stack = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        with self._lock:
            info = self._entries.pop(message_id, None)
            count = 1 if info is None else info.count + 1
            self._entries[message_id] = FailureInfo(count, error, stack[-MAX_STACK_TRACE_CHARS:])
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            return count

    def clear(self, message_id: uuid.UUID) -> None:
        with self._lock:
            self._entries.pop(message_id, None)


def _type_name(error: BaseException) -> str:
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def failure_entries(
    info: FailureInfo,
    failed_queue: str,
    *,
    endpoint: str | None = None,
    machine: str | None = None,
    failed_queue_last: bool = False,
) -> dict[str, str | None]:
    """The headers a failed message gains, in the order the reference sets them.

    NServiceBus Core's move to the error queue sets ``FailedQ``, then the exception headers
    (``ExceptionType``, ``InnerExceptionType`` when there is one, ``HelpLink``, ``Message``, ``Source``,
    ``StackTrace``, ``TimeOfFailure``), then the processing endpoint and machine. The transport's own
    path for a delayed message that cannot be forwarded sets the exception headers first and ``FailedQ``
    last (``failed_queue_last``). Python exceptions have no help link, so it is null, as .NET writes an
    exception without one.
    """
    error = info.error
    inner = error.__cause__ or error.__context__
    source = None
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        source = tb.tb_frame.f_globals.get("__name__")
    exception: dict[str, str | None] = {f"{h.EXCEPTION_INFO_PREFIX}ExceptionType": _type_name(error)}
    if inner is not None:
        exception[f"{h.EXCEPTION_INFO_PREFIX}InnerExceptionType"] = _type_name(inner)
    exception[f"{h.EXCEPTION_INFO_PREFIX}HelpLink"] = None
    exception[f"{h.EXCEPTION_INFO_PREFIX}Message"] = str(error)
    exception[f"{h.EXCEPTION_INFO_PREFIX}Source"] = source
    exception[f"{h.EXCEPTION_INFO_PREFIX}StackTrace"] = info.stack_trace
    exception[h.TIME_OF_FAILURE] = h.format_timestamp(datetime.now(timezone.utc))
    if failed_queue_last:
        entries = {**exception, h.FAILED_QUEUE: failed_queue}
    else:
        entries = {h.FAILED_QUEUE: failed_queue, **exception}
    if machine:
        entries[h.PROCESSING_MACHINE] = machine
    if endpoint:
        entries[h.PROCESSING_ENDPOINT] = endpoint
    return entries


def failure_headers(
    headers: Mapping[str, str | None],
    info: FailureInfo,
    failed_queue: str,
    *,
    endpoint: str | None = None,
    machine: str | None = None,
) -> dict[str, str | None]:
    """The message's headers plus NServiceBus's failure headers, for the copy sent to the error queue."""
    result = dict(headers)
    result.update(failure_entries(info, failed_queue, endpoint=endpoint, machine=machine))
    return result


def failure_headers_text(
    headers_text: str,
    info: FailureInfo,
    failed_queue: str,
    *,
    endpoint: str | None = None,
    machine: str | None = None,
    forwarding: bool = False,
) -> str:
    """The stored header text of a message moved to the error queue: the received text with the failure
    headers set (:func:`failure_entries`) and nothing else changed.

    As NServiceBus Core does, the retry counters ``NServiceBus.Retries`` and ``NServiceBus.FLRetries`` are
    removed first; a message that failed to be forwarded (``forwarding``) loses its
    ``NServiceBus.SqlServer.ForwardDestination`` instead and gains only the exception headers and
    ``FailedQ``, as the transport's forwarding does (no processing endpoint or machine). Key order
    and escaping follow :func:`~.headers.edit_headers_text`.
    """
    if forwarding:
        entries = failure_entries(info, failed_queue, failed_queue_last=True)
        return h.edit_headers_text(headers_text, entries, [h.FORWARD_DESTINATION])
    entries = failure_entries(info, failed_queue, endpoint=endpoint, machine=machine)
    removed = [h.DELAYED_RETRIES, h.IMMEDIATE_RETRIES]
    return h.edit_headers_text(headers_text, entries, removed)
