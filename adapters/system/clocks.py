"""Clocks for the Clock port: the system's, and a stepping one for repeatable runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["SteppingClock", "SystemClock"]


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        """The current time."""
        return datetime.now(UTC)


class SteppingClock:
    """A clock that starts at ``start`` and moves ``step`` forward on every reading.

    Same readings on every run, so traces and recordings repeat byte for byte.
    """

    def __init__(
        self,
        start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
        step: timedelta = timedelta(milliseconds=1),
    ) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self._now = start
        self._step = step

    def now(self) -> datetime:
        """The next reading."""
        reading = self._now
        self._now += self._step
        return reading
