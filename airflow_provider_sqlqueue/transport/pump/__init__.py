"""MessagePump: runs a handler over a queue with a concurrency limit, as the reference's receivers do.

Three strategies, chosen by name (see docs/concurrency.md):

- ``monitor`` (default, the reference's 3.0+ design): one monitoring loop peeks the pending estimate, starts
  up to that many receive tasks within the free slots, waits until every started task has executed its
  receive statement before it peeks again, ends a round at the first empty receive, and sleeps the idle
  delay when the queue is empty. No empty-receive storms.
- ``adaptive`` (2.1): polling workers, each with its own :class:`RampUpController`; more than 5 messages in
  a row start another worker up to the limit, 7 empty receives in a row retire the worker down to a single
  one, an empty receive backs off from 50 ms doubling to the idle delay, and a handler running over 5 s
  starts one more worker.
- ``fixed`` (before 2.0): ``max_concurrency`` polling workers, each sleeping the idle delay when the queue
  is empty.

Every receive takes one message in its own connection and transaction (the core's transaction modes). A
handler exception rolls the message back (in mode ``none``, with nothing to roll back, the message goes to the
error queue at once); failures are counted per native message Id across rollbacks, and once the immediate
retries are spent the next receive moves the message, with failure headers, to the error queue in the
receive's transaction. Database failures go through a circuit breaker; deadlocks are retried without counting.
Nothing here imports Airflow.

The modules of this package, one idea each: :mod:`.message_pump` (the pump, its threads and loops),
:mod:`.settings` (how a pump runs, declared once), :mod:`.roles` (what each part sees of the pump),
:mod:`.strategy` (the strategies and the adaptive ramp-up), :mod:`.pacing` (message budget, monitor rounds,
back-off), :mod:`.receive` (one receive, of one message or a batch, for every strategy), :mod:`.processing`
(one message: forward, handle with retries, error queue, audit), :mod:`.context`
(what a handler may send), :mod:`.handler` (loading a handler) and :mod:`.stats` (counters).
"""

from __future__ import annotations

from .context import MessageContext
from .handler import Handler, load_handler
from .message_pump import MessagePump, check_pool_size
from .settings import PumpSettings
from .stats import PumpStats
from .strategy import RampUpController, Strategy

__all__ = [
    "Handler",
    "MessageContext",
    "MessagePump",
    "PumpSettings",
    "PumpStats",
    "RampUpController",
    "Strategy",
    "check_pool_size",
    "load_handler",
]
