"""CdcLandedFilesTrigger: the deferrable half of ``CdcLandedFilesSensor``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc_provider.landing.coverage import CoverageSpec, check_coverage
from airflow_cdc_provider.landing.probe import LandingProbe


class CdcLandedFilesTrigger(BaseTrigger):
    """Poll a landing from the triggerer until it covers AS OF, or until ``deadline``.

    Holds primitives only; every check runs in a worker thread (``asyncio.to_thread``) because
    listing and reading files is blocking I/O that must not stall the triggerer's event loop. It
    yields exactly one event: ``{"status": "covered", ...}`` with the sensor's XCom summary,
    ``{"status": "timeout", "waiting_for", "seen"}`` once the deadline has passed, or
    ``{"status": "error", "message"}`` when a check raised.

    :param poke_interval: seconds between checks.
    :param deadline: epoch seconds after which the trigger gives up (None: never).

    The other keyword arguments are the fields of :class:`CoverageSpec`.
    """

    def __init__(
        self,
        *,
        path: str,
        as_of_ms: int,
        strategy: str,
        marker: str,
        partition_pattern: str | None,
        partition_timezone: str,
        source_format: str | None,
        allowed_lateness_ms: int,
        newest_files: int,
        conn_id: str | None,
        poke_interval: float,
        deadline: float | None,
    ) -> None:
        super().__init__()
        self.spec = CoverageSpec(
            path=path,
            as_of_ms=as_of_ms,
            strategy=strategy,
            marker=marker,
            partition_pattern=partition_pattern,
            partition_timezone=partition_timezone,
            source_format=source_format,
            allowed_lateness_ms=allowed_lateness_ms,
            newest_files=newest_files,
            conn_id=conn_id,
        )
        self.poke_interval = float(poke_interval)
        self.deadline = deadline

    @classmethod
    def for_spec(
        cls, spec: CoverageSpec, *, poke_interval: float, deadline: float | None
    ) -> CdcLandedFilesTrigger:
        return cls(**asdict(spec), poke_interval=poke_interval, deadline=deadline)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {**asdict(self.spec), "poke_interval": self.poke_interval, "deadline": self.deadline},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        probe: LandingProbe | None = None
        while True:
            try:
                if probe is None:
                    probe = await asyncio.to_thread(LandingProbe, self.spec.path, self.spec.conn_id)
                coverage = await asyncio.to_thread(check_coverage, self.spec, probe)
            except Exception as exc:  # noqa: BLE001 - the sensor turns this into a task failure
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if coverage.covered:
                yield TriggerEvent({"status": "covered", **self.spec.summary(coverage)})
                return
            self.log.info("Waiting for %s; seen: %s", coverage.waiting_for, coverage.seen)
            remaining = None if self.deadline is None else self.deadline - time.time()
            if remaining is not None and remaining <= 0:
                yield TriggerEvent(
                    {"status": "timeout", "waiting_for": coverage.waiting_for, "seen": coverage.seen}
                )
                return
            await asyncio.sleep(
                self.poke_interval if remaining is None else min(self.poke_interval, remaining)
            )
