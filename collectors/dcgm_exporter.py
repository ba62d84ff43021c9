"""GPU activity from a local dcgm-exporter's ``/metrics`` (many GPU nodes already run one).

dcgm-exporter renders one series per GPU (per MIG instance, per pod with the Kubernetes
mapping) as ``FIELD{gpu="0",UUID="GPU-…",pci_bus_id="…",device="nvidia0",modelName="…",
Hostname="…",…} VALUE``, without timestamps. The exposition is parsed with prometheus-client's
parser, never by hand. Fields read, best first (see :mod:`agent.separation`):

=================================== ==================== =====================================
field                               signal               meaning
=================================== ==================== =====================================
``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` ``tensor_active``    ratio of cycles the tensor pipe works
``DCGM_FI_PROF_SM_ACTIVE``          ``sm_active``        ratio of cycles an SM has a warp
``DCGM_FI_PROF_GR_ENGINE_ACTIVE``   ``gr_engine_active`` ratio of time the engine is busy
``DCGM_FI_DEV_GPU_UTIL``            ``util``             utilization.gpu, percent
=================================== ==================== =====================================

``GR_ENGINE_ACTIVE`` and ``GPU_UTIL`` count NCCL's spinning kernels as busy; only the first two
tell compute from communication. dcgm-exporter's default counters enable TENSOR_ACTIVE and
GR_ENGINE_ACTIVE but not SM_ACTIVE.

A value is an average over DCGM's collection interval (dcgm-exporter ``-c``, 30 s by
default: far too coarse to split a step of a few seconds; run it with ``-c 100`` or use the
NVML source). Polling faster than that interval returns the same value again, so a GPU's
sample is emitted only when one of its values changed (or every ``max_silence_s``): the
spacing of the samples is then the spacing of DCGM's averages.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import urlparse

from prometheus_client.parser import text_string_to_metric_families

from agent.clock import Clock, Ticker
from agent.errors import ConfigError, InputFormatError, SourceError, SourceUnavailable
from collectors._base import Emit, GpuReading
from collectors._config import check_interval, doc

__all__ = [
    "DCGM_FIELDS",
    "DcgmExporterConfig",
    "DcgmExporterSource",
    "DcgmScrape",
    "parse_dcgm_metrics",
]

log = logging.getLogger(__name__)

#: dcgm-exporter field → (our signal name, factor to a 0..1 fraction).
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util", 0.01),
}

#: Largest exposition read (a host with 8 GPUs and every field is ~100 kB).
MAX_BODY_BYTES = 16 << 20


@dataclass(frozen=True)
class DcgmScrape:
    """One exposition: per GPU index, the signals (fractions 0..1) it reported.

    Several series of one GPU are combined: the series of one MIG instance (``GPU_I_ID``; one
    per pod using it, or per pod sharing a whole GPU by time-slicing) are averaged, and the
    instances are weighted by their compute slices (``GPU_I_PROFILE`` ``3g.40gb``: 3, and
    ``1c.3g.40gb``: 1), so that the value is the activity of the part of the GPU in use: a
    3-slice instance at 0.6 beside an idle 1-slice one is 0.45, not 0.3. ``signals`` is the set
    every GPU reported (a reading has one signal set); ``skipped`` counts series left out (no
    or bad ``gpu`` label, NaN, out of range).
    """

    gpus: dict[int, dict[str, float]]
    signals: tuple[str, ...]
    skipped: int = 0
    models: dict[int, str] = field(default_factory=dict)


_MIG_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")


def _mig_slices(profile: str) -> int:
    """Compute slices of a MIG profile label: ``3g.40gb`` 3, ``1c.3g.40gb`` 1, none 1."""
    m = _MIG_PROFILE.match(profile)
    if m is None:
        return 1
    return max(1, int(m.group(1) or m.group(2)))


def _weighted(instances: dict[str, tuple[int, list[float]]]) -> float:
    """Slice-weighted mean over MIG instances of each instance's mean over its series."""
    known = [(w, v) for w, v in instances.values() if v]
    if not known:
        return math.nan
    total = sum(w for w, _ in known)
    return sum(w * sum(v) / len(v) for w, v in known) / total


def parse_dcgm_metrics(text: str) -> DcgmScrape:
    """Parse a dcgm-exporter exposition (pure).

    Raises:
        InputFormatError: the text is not Prometheus exposition format.
    """
    # gpu -> signal -> MIG instance ("" for a whole GPU) -> (slices, values of its series)
    sums: dict[int, dict[str, dict[str, tuple[int, list[float]]]]] = {}
    models: dict[int, str] = {}
    skipped = 0
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise InputFormatError("<dcgm-exporter>", f"not a Prometheus exposition: {exc}") from None
    for family in families:
        mapped = DCGM_FIELDS.get(family.name.upper())  # some relabelled exporters lower-case it
        if mapped is None:
            continue
        signal, factor = mapped
        for sample in family.samples:
            gpu_label = sample.labels.get("gpu", "")
            value = float(sample.value) * factor
            finite = math.isfinite(value)
            if not (gpu_label.isascii() and gpu_label.isdigit()) or (
                finite and not -1e-6 <= value <= 1.01
            ):
                skipped += 1
                continue
            gpu = int(gpu_label)
            instances = sums.setdefault(gpu, {}).setdefault(signal, {})
            instance = sample.labels.get("GPU_I_ID", "")
            slices = _mig_slices(sample.labels.get("GPU_I_PROFILE", ""))
            values = instances.setdefault(instance, (slices, []))[1]
            if finite:
                values.append(min(max(value, 0.0), 1.0))
            else:
                # Unknown this scrape, but the GPU has the field: dropped, one GPU's NaN took
                # the field from every GPU's reading, and the changed signal set restarted the
                # GPU window.
                skipped += 1
            model = sample.labels.get("modelName")
            if model:
                models[gpu] = model
    gpus = {g: {s: _weighted(inst) for s, inst in sig.items()} for g, sig in sums.items()}
    common = set.intersection(*(set(s) for s in gpus.values())) if gpus else set()
    order = [name for name, _ in DCGM_FIELDS.values()]
    signals = tuple(s for s in order if s in common)
    return DcgmScrape(
        gpus={g: {s: v[s] for s in signals} for g, v in gpus.items()},
        signals=signals,
        skipped=skipped,
        models=models,
    )


@dataclass(frozen=True)
class DcgmExporterConfig:
    """Settings of the dcgm-exporter source (section ``[sources.dcgm_exporter]``)."""

    enabled: bool = doc(False, "Read GPU activity from a dcgm-exporter /metrics endpoint.")
    url: str = doc("http://127.0.0.1:9400/metrics", "The endpoint (dcgm-exporter's default).")
    poll_interval_s: float = doc(
        0.5, "Seconds between scrapes; values change at dcgm-exporter's -c interval."
    )
    timeout_s: float = doc(2.0, "HTTP timeout of one scrape.")
    max_silence_s: float = doc(
        10.0, "Emit a GPU's unchanged values again after this long (a steady GPU still counts)."
    )

    def __post_init__(self) -> None:
        section = "sources.dcgm_exporter"
        check_interval(section, "poll_interval_s", self.poll_interval_s, 0.05, 60.0)
        check_interval(section, "timeout_s", self.timeout_s, 0.1, 30.0)
        check_interval(section, "max_silence_s", self.max_silence_s, 1.0, 3600.0)
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{section}.url: {self.url!r} is not an http(s) URL")


class DcgmExporterSource:
    """Scrapes dcgm-exporter off the event loop and emits one reading per GPU and update."""

    name = "dcgm_exporter"

    def __init__(self, config: DcgmExporterConfig, *, clock: Clock) -> None:
        self._cfg = config
        self._clock = clock
        self._last: dict[int, tuple[float, dict[str, float]]] = {}  # gpu → (emitted at, values)
        self._scraped: float | None = None  # when the last scrape was parsed
        self.skipped_series = 0

    def _fetch(self) -> str:
        request = urllib.request.Request(self._cfg.url, headers={"Accept": "text/plain"})  # noqa: S310 - the URL is checked to be http(s)
        try:
            with urllib.request.urlopen(request, timeout=self._cfg.timeout_s) as resp:  # noqa: S310
                body: bytes = resp.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            exc.close()  # it holds the response (and its socket)
            raise SourceError(self.name, f"{self._cfg.url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SourceUnavailable(self.name, f"{self._cfg.url}: {reason}") from None
        if len(body) > MAX_BODY_BYTES:
            raise SourceError(self.name, f"{self._cfg.url}: exposition larger than 16 MiB")
        return body.decode("utf-8", errors="replace")

    def readings(self, scrape: DcgmScrape, now: float) -> list[GpuReading]:
        """Every GPU's reading when any GPU's values changed (or were quiet too long).

        DCGM updates all GPUs at its ``-c`` interval, so one changed value is a new sample of
        each. Emitted one GPU at a time, an idle GPU (exactly 0.0 every time) came once per
        ``max_silence_s``: the median sample spacing of a node with four idle GPUs of eight
        read 5 s, and the exposed/overlapped split was refused ("GPU samples every 5.07 s").
        """
        ticked = any(
            (last := self._last.get(gpu)) is None
            or last[1] != values
            or now - last[0] >= self._cfg.max_silence_s
            for gpu, values in scrape.gpus.items()
        )
        previous, self._scraped = self._scraped, now
        if not ticked:
            return []
        for gpu, values in scrape.gpus.items():
            self._last[gpu] = (now, values)
        # DCGM's average ended somewhere since the previous scrape: stamped at this one, the
        # samples ran up to a poll late, and a live probe's exposed share read 0.11 against
        # 0.15 (at poll = -c = 0.1 s). Halfway is the expected end.
        at = (
            now
            if previous is None
            else now - 0.5 * min(now - previous, self._cfg.poll_interval_s * 2)
        )
        return [GpuReading(at, gpu, dict(values)) for gpu, values in sorted(scrape.gpus.items())]

    async def run(self, emit: Emit) -> None:
        """Scrape until cancelled; an endpoint that is down raises (the pipeline retries)."""
        ticker = Ticker(self._clock, self._cfg.poll_interval_s)
        signals: tuple[str, ...] | None = None
        while True:
            text = await asyncio.to_thread(self._fetch)
            now = self._clock.now()
            try:
                scrape = parse_dcgm_metrics(text)
            except InputFormatError as exc:
                raise SourceError(self.name, f"{self._cfg.url}: {exc.reason}") from None
            self.skipped_series += scrape.skipped
            if not scrape.gpus and scrape.skipped:
                # The fields are there, but no series could be read: relabelled away from a
                # numeric ``gpu`` label (a UUID in it), or every value NaN or out of range.
                raise SourceUnavailable(
                    self.name,
                    f"{self._cfg.url}: none of its {scrape.skipped} GPU activity series has a "
                    'numeric gpu label (dcgm-exporter\'s gpu="0"; relabelled, or a UUID?) and '
                    "a value in range",
                )
            if not scrape.gpus:
                raise SourceUnavailable(
                    self.name,
                    f"{self._cfg.url} has no GPU activity field "
                    f"({', '.join(DCGM_FIELDS)}): enable one in dcgm-exporter's counters file",
                )
            if not scrape.signals:  # e.g. a MIG GPU with profiling fields, another with util only
                raise SourceUnavailable(
                    self.name,
                    f"{self._cfg.url}: its {len(scrape.gpus)} GPUs have no activity field in "
                    f"common ({', '.join(DCGM_FIELDS)}): enable the same one for every GPU",
                )
            if scrape.signals != signals:
                log.info(
                    "dcgm-exporter: %d GPU(s), signals %s",
                    len(scrape.gpus),
                    ", ".join(scrape.signals),
                    extra={"source": self.name},
                )
                signals = scrape.signals
            for reading in self.readings(scrape, now):
                emit(reading)
            await ticker.tick()
