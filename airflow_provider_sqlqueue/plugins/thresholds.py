"""When the Queues page colours a queue: how long its oldest message may wait and how deep it may grow before
it is shown yellow (warning) or red (alert), from Airflow's configuration.

What is normal depends on the workload (a nightly batch queue of a million rows is fine; a request queue of a
thousand is not), so each team sets its own: ``[sqlqueue] age_warning_seconds``, ``age_alert_seconds``,
``depth_warning`` and ``depth_alert`` (environment ``AIRFLOW__SQLQUEUE__AGE_WARNING_SECONDS`` and so on); 0
turns one off. A value that is not a whole number from 0, or an alert below its warning, is not guessed at:
the page keeps the defaults and says which setting it ignored and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..get_provider_info import setting_default

__all__ = ["ALERT", "DEFAULTS", "WARNING", "Thresholds", "configured_thresholds", "thresholds_of"]

ALERT = "alert"
WARNING = "warning"

# The settings and their defaults, declared with the provider's metadata (``airflow config list`` names them)
DEFAULTS = {
    name: int(setting_default(name))
    for name in ("age_warning_seconds", "age_alert_seconds", "depth_warning", "depth_alert")
}


@dataclass(frozen=True)
class Thresholds:
    """The four limits (0: off) and, when a setting was ignored, the sentence that says so."""

    age_warning_seconds: int = DEFAULTS["age_warning_seconds"]
    age_alert_seconds: int = DEFAULTS["age_alert_seconds"]
    depth_warning: int = DEFAULTS["depth_warning"]
    depth_alert: int = DEFAULTS["depth_alert"]
    problem: str | None = None

    def age_level(self, seconds: float | None) -> str | None:
        """``alert``, ``warning`` or None for a queue whose oldest message has waited ``seconds``."""
        return _level(seconds, self.age_warning_seconds, self.age_alert_seconds)

    def depth_level(self, messages: int | None) -> str | None:
        """``alert``, ``warning`` or None for a queue of ``messages``."""
        return _level(messages, self.depth_warning, self.depth_alert)

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in DEFAULTS} | {"problem": self.problem}


def _level(value: float | None, warning: int, alert: int) -> str | None:
    if value is None:
        return None
    if alert and value >= alert:
        return ALERT
    if warning and value >= warning:
        return WARNING
    return None


def thresholds_of(values: dict[str, str | None]) -> Thresholds:
    """The thresholds from the settings' raw text (None: not set), each checked; defaults where one fails."""
    chosen: dict[str, int] = dict(DEFAULTS)
    problems: list[str] = []
    for name, text in values.items():
        if text is None or not text.strip():
            continue
        try:
            number = int(text.strip())
        except ValueError:
            number = -1
        if number < 0:
            problems.append(f"[sqlqueue] {name} is {text.strip()!r}, not a whole number from 0")
            continue
        chosen[name] = number
    for warning, alert in (("age_warning_seconds", "age_alert_seconds"), ("depth_warning", "depth_alert")):
        if chosen[warning] and chosen[alert] and chosen[alert] < chosen[warning]:
            problems.append(f"[sqlqueue] {alert} ({chosen[alert]}) is below {warning} ({chosen[warning]})")
            chosen[warning], chosen[alert] = DEFAULTS[warning], DEFAULTS[alert]
    problem = None
    if problems:
        problem = (
            "; ".join(problems)
            + ": the page uses the defaults for "
            + ("those" if len(problems) > 1 else "it")
        )
    return Thresholds(**chosen, problem=problem)


def configured_thresholds() -> Thresholds:
    """The thresholds Airflow's configuration sets (``[sqlqueue]``), read on every page view."""
    from airflow.configuration import conf

    return thresholds_of({name: conf.get("sqlqueue", name, fallback=None) for name in DEFAULTS})
