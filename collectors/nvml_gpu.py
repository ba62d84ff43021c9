"""GPU activity straight from the driver with NVML (nvidia-ml-py), no exporter needed.

Two signals, the better one when the GPU has it:

* **GPM** (Hopper and later): ``NVML_GPM_METRIC_SM_UTIL`` (share of SMs busy, like DCGM's
  SM_ACTIVE), ``NVML_GPM_METRIC_ANY_TENSOR_UTIL`` and ``NVML_GPM_METRIC_GRAPHICS_UTIL``, each
  an average over the interval between two GPM samples: read as ``sm_active``,
  ``tensor_active`` and ``gr_engine_active``. SM and tensor activity tell compute from NCCL.
* otherwise the driver's **utilization sample buffer** (``nvmlDeviceGetSamples`` with
  ``NVML_GPU_UTILIZATION_SAMPLES``): every sample the driver took since the last poll, with its
  own timestamp (µs, wall clock), instead of one coarse ``utilization.gpu`` per poll. It counts
  NCCL's spinning kernels as busy (``util``).

One source emits one signal set (the GPU window keeps one): GPM when every GPU supports it.
A missing library, driver or GPU raises :class:`SourceUnavailable` (``up=0``, retried with
backoff); a GPU that falls off the bus (Xid 79, ``NVML_ERROR_GPU_IS_LOST``) is dropped and
logged, the others go on.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from agent.clock import Clock
from agent.errors import SourceError, SourceUnavailable
from collectors._base import Emit, GpuReading, Reading
from collectors._config import check_interval, doc
from collectors._sampler import Sampler

__all__ = ["GPM_SIGNALS", "NvmlConfig", "NvmlGpuSource"]

log = logging.getLogger(__name__)

#: GPM metric constant name in pynvml → our signal (the value is a percentage).
GPM_SIGNALS: dict[str, str] = {
    "NVML_GPM_METRIC_SM_UTIL": "sm_active",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": "tensor_active",
    "NVML_GPM_METRIC_GRAPHICS_UTIL": "gr_engine_active",
}


@dataclass(frozen=True)
class NvmlConfig:
    """Settings of the NVML source (section ``[sources.nvml]``)."""

    enabled: bool = doc(False, "Read GPU activity with NVML (pip install 'commpulse[nvml]').")
    poll_interval_s: float = doc(
        0.1, "Seconds between polls: one GPM interval, or a read of the utilization buffer."
    )
    gpm: bool = doc(True, "Use GPM SM/tensor activity where every GPU has it (Hopper+).")
    devices: tuple[int, ...] = doc((), "GPU indices to read; empty: all.")

    def __post_init__(self) -> None:
        check_interval("sources.nvml", "poll_interval_s", self.poll_interval_s, 0.02, 10.0)


@dataclass
class _Gpu:
    index: int
    handle: Any
    last_ts_us: int = 0
    gpm_prev: Any = None
    gpm_next: Any = None
    lost: bool = False


def _load_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise SourceUnavailable(
            "nvml", "nvidia-ml-py is not installed: pip install 'commpulse[nvml]'"
        ) from None


class NvmlGpuSource:
    """Polls NVML in the sampling thread; emits one reading per GPU sample."""

    name = "nvml"

    def __init__(
        self,
        config: NvmlConfig,
        *,
        clock: Clock,
        sampler: Sampler | None = None,
        nvml: ModuleType | None = None,
    ) -> None:
        self._cfg = config
        self._clock = clock
        self._sampler = sampler or Sampler(clock)
        self._nvml = nvml
        self.mode: str | None = None  # "gpm" or "util", once started

    def _error(self, nvml: ModuleType, exc: Exception) -> int | None:
        return getattr(exc, "value", None) if isinstance(exc, nvml.NVMLError) else None

    def _open(self, nvml: ModuleType) -> list[_Gpu]:
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise SourceUnavailable(self.name, f"NVML cannot start: {exc}") from None
        try:
            count = int(nvml.nvmlDeviceGetCount())
            wanted = self._cfg.devices or tuple(range(count))
            missing = [i for i in wanted if not 0 <= i < count]
            if missing:
                raise SourceUnavailable(
                    self.name, f"no GPU {missing} (this host has {count}: 0..{count - 1})"
                )
            if not wanted:
                raise SourceUnavailable(self.name, "NVML sees no GPU")
            gpus = [_Gpu(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in wanted]
            use_gpm = self._cfg.gpm and all(self._gpm_supported(nvml, g) for g in gpus)
            if use_gpm:
                for g in gpus:
                    g.gpm_prev = nvml.nvmlGpmSampleAlloc()
                    g.gpm_next = nvml.nvmlGpmSampleAlloc()
                    nvml.nvmlGpmSampleGet(g.handle, g.gpm_prev)
            else:
                # Start at "now": the buffer's history is older than the windows care about.
                for g in gpus:
                    g.last_ts_us = int(time.time() * 1e6)
        except nvml.NVMLError as exc:
            self._close(nvml)
            raise SourceUnavailable(self.name, f"NVML: {exc}") from None
        except SourceUnavailable:
            self._close(nvml)
            raise
        self.mode = "gpm" if use_gpm else "util"
        log.info(
            "NVML: %d GPU(s), %s",
            len(gpus),
            "GPM sm_active/tensor_active" if use_gpm else "utilization samples (util)",
            extra={"source": self.name},
        )
        return gpus

    def _gpm_supported(self, nvml: ModuleType, gpu: _Gpu) -> bool:
        try:
            return bool(nvml.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice)
        except (nvml.NVMLError, AttributeError):  # old driver / old nvidia-ml-py
            return False

    def _close(self, nvml: ModuleType) -> None:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            log.debug("nvmlShutdown failed", exc_info=True)

    def _gpm_reading(self, nvml: ModuleType, gpu: _Gpu, now: float) -> GpuReading | None:
        nvml.nvmlGpmSampleGet(gpu.handle, gpu.gpm_next)
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_SIGNALS)
        request.sample1 = gpu.gpm_prev
        request.sample2 = gpu.gpm_next
        for i, constant in enumerate(GPM_SIGNALS):
            request.metrics[i].metricId = getattr(nvml, constant)
        nvml.nvmlGpmMetricsGet(request)
        gpu.gpm_prev, gpu.gpm_next = gpu.gpm_next, gpu.gpm_prev
        signals = {}
        for i, signal in enumerate(GPM_SIGNALS.values()):
            metric = request.metrics[i]
            if metric.nvmlReturn != nvml.NVML_SUCCESS:
                return None  # this interval could not be measured: no sample, not a zero
            signals[signal] = min(max(float(metric.value) / 100.0, 0.0), 1.0)
        return GpuReading(now, gpu.index, signals)

    def _util_readings(self, nvml: ModuleType, gpu: _Gpu, now: float) -> list[GpuReading]:
        try:
            _, samples = nvml.nvmlDeviceGetSamples(
                gpu.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, gpu.last_ts_us
            )
        except nvml.NVMLError as exc:
            if self._error(nvml, exc) == nvml.NVML_ERROR_NOT_FOUND:
                return []  # no new sample since the last poll
            raise
        wall = time.time()
        out = []
        for s in sorted(samples, key=lambda s: int(s.timeStamp)):
            ts = int(s.timeStamp)
            if ts <= gpu.last_ts_us:
                continue
            gpu.last_ts_us = ts
            util = min(max(float(s.sampleValue.uiVal) / 100.0, 0.0), 1.0)
            # Driver timestamps are wall-clock µs: carried onto the agent's clock.
            out.append(GpuReading(now - (wall - ts / 1e6), gpu.index, {"util": util}))
        return out

    def sweep(self, nvml: ModuleType, gpus: list[_Gpu]) -> list[Reading]:
        """One poll of every GPU that is still on the bus."""
        now = self._clock.now()
        out: list[Reading] = []
        for gpu in gpus:
            if gpu.lost:
                continue
            try:
                if self.mode == "gpm":
                    reading = self._gpm_reading(nvml, gpu, now)
                    if reading is not None:
                        out.append(reading)
                else:
                    out.extend(self._util_readings(nvml, gpu, now))
            except nvml.NVMLError as exc:
                if self._error(nvml, exc) != nvml.NVML_ERROR_GPU_IS_LOST:
                    raise SourceError(self.name, f"GPU {gpu.index}: {exc}") from None
                gpu.lost = True
                log.error(
                    "GPU %d fell off the bus (NVML: %s; look for Xid 79 in the kernel log); "
                    "reading the others",
                    gpu.index,
                    exc,
                    extra={"source": self.name},
                )
        if all(g.lost for g in gpus):
            raise SourceError(self.name, "every GPU is lost")
        return out

    async def run(self, emit: Emit) -> None:
        """Poll until cancelled."""
        nvml = self._nvml or _load_pynvml()
        gpus = await asyncio.to_thread(self._open, nvml)  # nvmlInit can take a second
        try:
            await self._sampler.run(
                self.name, self._cfg.poll_interval_s, lambda: self.sweep(nvml, gpus), emit
            )
        finally:
            if self.mode == "gpm":
                for g in gpus:
                    for sample in (g.gpm_prev, g.gpm_next):
                        try:
                            nvml.nvmlGpmSampleFree(sample)
                        except nvml.NVMLError:
                            log.debug("nvmlGpmSampleFree failed", exc_info=True)
            self._close(nvml)
