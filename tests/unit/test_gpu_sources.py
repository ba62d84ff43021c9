"""GPU activity sources: dcgm-exporter (real exposition, real HTTP) and NVML.

There is no GPU here. dcgm-exporter is exercised with expositions shaped exactly as its
template renders them (tests/fixtures/dcgm-exporter), served over real HTTP. NVML runs for real
as far as this host allows (nvidia-ml-py without a driver: "library not found"); beyond that, a
stand-in for the driver keeps pynvml's own structures, constants and error classes and only
replaces the C calls.
"""

from __future__ import annotations

import asyncio
import ctypes
import http.server
import math
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from agent.clock import FakeClock, MonotonicClock
from agent.config import ConfigError, load_config
from agent.errors import InputFormatError, SourceError, SourceUnavailable
from collectors._base import GpuReading, Reading
from collectors.dcgm_exporter import (
    DcgmExporterConfig,
    DcgmExporterSource,
    parse_dcgm_metrics,
)
from collectors.nvml_gpu import NvmlConfig, NvmlGpuSource

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter"


# --------------------------------------------------------------------------------------------
# dcgm-exporter: the parser


def test_default_counters_of_an_8_gpu_h100_host() -> None:
    scrape = parse_dcgm_metrics((FIXTURES / "h100-8gpu.prom").read_text())
    assert sorted(scrape.gpus) == list(range(8))
    # the default counters have TENSOR_ACTIVE (compute-distinguishing) but not SM_ACTIVE
    assert scrape.signals == ("tensor_active", "gr_engine_active", "util")
    for g in range(8):
        assert scrape.gpus[g]["tensor_active"] == pytest.approx(0.40 + 0.01 * g)
    assert scrape.gpus[5]["util"] == pytest.approx(0.97)  # percent → fraction
    assert scrape.models[0] == "NVIDIA H100 80GB HBM3"
    assert scrape.skipped == 0


def test_mig_instances_and_pod_series_of_one_gpu_are_averaged() -> None:
    scrape = parse_dcgm_metrics((FIXTURES / "h100-mig-k8s.prom").read_text())
    assert scrape.gpus[0]["tensor_active"] == pytest.approx(0.3)  # two 3g instances: 0.6, 0.0
    assert scrape.gpus[1]["tensor_active"] == pytest.approx(0.45)


def test_mig_instances_weigh_by_their_compute_slices_and_pods_of_one_instance_once() -> None:
    """A 3-slice instance at 0.6 (seen by two pods) and an idle 1-slice one: 0.45 of the part
    of the GPU in use; an unweighted mean of the three series said 0.4. A compute instance
    (``1c.3g``) counts its own slice."""
    labels = 'gpu="0",UUID="GPU-a",modelName="NVIDIA A100-SXM4-80GB"'
    text = (
        "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"
        f'DCGM_FI_PROF_SM_ACTIVE{{{labels},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",pod="a"}} 0.6\n'
        f'DCGM_FI_PROF_SM_ACTIVE{{{labels},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",pod="b"}} 0.6\n'
        f'DCGM_FI_PROF_SM_ACTIVE{{{labels},GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",pod="c"}} 0.0\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1",GPU_I_PROFILE="1c.3g.40gb",GPU_I_ID="2"} 0.8\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1",GPU_I_PROFILE="2g.20gb",GPU_I_ID="5"} 0.2\n'
    )
    scrape = parse_dcgm_metrics(text)
    assert scrape.gpus[0]["sm_active"] == pytest.approx(0.45)
    assert scrape.gpus[1]["sm_active"] == pytest.approx((1 * 0.8 + 2 * 0.2) / 3)


def test_bad_series_are_counted_not_used() -> None:
    text = (
        "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0"} 0.5\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1"} NaN\n'
        'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-x"} 0.5\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="2"} 7.5\n'
    )
    scrape = parse_dcgm_metrics(text)
    assert scrape.gpus[0] == {"sm_active": 0.5}
    assert math.isnan(scrape.gpus[1]["sm_active"])  # the GPU has the field: unknown this time
    assert set(scrape.gpus) == {0, 1}
    assert scrape.skipped == 3
    assert parse_dcgm_metrics('DCGM_FI_DEV_GPU_UTIL{gpu="²"} 40\n').skipped == 1


def test_one_gpus_nan_keeps_the_field_for_every_gpu() -> None:
    """A transient NaN on one GPU took its field from the scrape's common set: every GPU's
    reading fell to util for that scrape, and the changed signal set restarted the window."""
    text = (
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0"} 0.5\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1"} NaN\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 100\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1"} 40\n'
    )
    scrape = parse_dcgm_metrics(text)
    assert scrape.signals == ("sm_active", "util")
    assert scrape.gpus[1]["util"] == pytest.approx(0.4)
    assert math.isnan(scrape.gpus[1]["sm_active"])


def test_a_gpu_missing_a_field_limits_the_signal_set_to_the_common_one() -> None:
    text = (
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0"} 0.5\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 100\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1"} 40\n'
    )
    scrape = parse_dcgm_metrics(text)
    assert scrape.signals == ("util",)
    assert scrape.gpus == {0: {"util": 1.0}, 1: {"util": 0.4}}


@pytest.mark.parametrize(
    "text", ["<html><body>502 Bad Gateway</body></html>", "DCGM_FI_DEV_GPU_UTIL{gpu=0} 1\n"]
)
def test_malformed_exposition_is_a_clear_error(text: str) -> None:
    with pytest.raises(InputFormatError, match="not a Prometheus exposition"):
        parse_dcgm_metrics(text)


# --------------------------------------------------------------------------------------------
# dcgm-exporter: the source, over real HTTP


class _Exporter:
    """A real HTTP server that serves whatever exposition the test sets."""

    def __init__(self) -> None:
        self.body = b""
        self.status = 200
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(exporter.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(exporter.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter() -> Iterator[_Exporter]:
    e = _Exporter()
    yield e
    e.close()


def _collect(source: DcgmExporterSource, n: int, timeout_s: float = 10.0) -> list[Reading]:
    async def main() -> list[Reading]:
        out: list[Reading] = []
        task = asyncio.create_task(source.run(out.append))
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            if task.done():
                task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return out

    return asyncio.run(main())


def _gpu_util(values: list[int]) -> bytes:
    lines = ["# TYPE DCGM_FI_PROF_SM_ACTIVE gauge"]
    lines += [
        f'DCGM_FI_PROF_SM_ACTIVE{{gpu="{g}",UUID="GPU-{g}"}} {v / 100}'
        for g, v in enumerate(values)
    ]
    return ("\n".join(lines) + "\n").encode()


def test_source_emits_one_reading_per_gpu_of_the_fixture(exporter: _Exporter) -> None:
    exporter.body = (FIXTURES / "h100-8gpu.prom").read_bytes()
    cfg = DcgmExporterConfig(enabled=True, url=exporter.url, poll_interval_s=0.05)
    readings = _collect(DcgmExporterSource(cfg, clock=MonotonicClock()), 8)
    assert [r.gpu for r in readings if isinstance(r, GpuReading)] == list(range(8))
    assert all(
        isinstance(r, GpuReading)
        and set(r.signals) == {"tensor_active", "gr_engine_active", "util"}
        for r in readings
    )


def test_unchanged_values_are_not_sampled_again_until_max_silence(exporter: _Exporter) -> None:
    """dcgm-exporter repeats a value until DCGM's next average: repeats are not new samples."""
    exporter.body = _gpu_util([50])
    clock = FakeClock()
    source = DcgmExporterSource(
        DcgmExporterConfig(enabled=True, url=exporter.url, max_silence_s=10.0), clock=clock
    )
    scrape = parse_dcgm_metrics(exporter.body.decode())
    assert len(source.readings(scrape, clock.now())) == 1
    clock.advance(5.0)
    assert source.readings(scrape, clock.now()) == []
    clock.advance(5.0)
    assert len(source.readings(scrape, clock.now())) == 1  # 10 s of silence: sampled again
    changed = parse_dcgm_metrics(_gpu_util([60]).decode())
    clock.advance(0.5)
    (reading,) = source.readings(changed, clock.now())
    assert reading.signals == {"sm_active": pytest.approx(0.6)}
    # DCGM's new average ended somewhere in the 0.5 s since the last scrape: halfway.
    assert reading.time_s == pytest.approx(clock.now() - 0.25)


def test_a_change_on_one_gpu_is_a_new_sample_of_every_gpu(exporter: _Exporter) -> None:
    """DCGM updates every GPU at its interval: an idle GPU reading exactly 0.0 each time was
    emitted once per max_silence_s, and four such GPUs of eight made the median spacing 5 s
    (the split refused: "GPU samples every 5.07 s")."""
    source = DcgmExporterSource(
        DcgmExporterConfig(enabled=True, url=exporter.url, max_silence_s=10.0), clock=FakeClock()
    )
    busy = [80, 20, 80, 20]
    for k in range(20):
        values = [busy[k % 4], 0, 0, 0]  # GPU 0 changes, GPUs 1-3 idle at exactly 0
        out = source.readings(parse_dcgm_metrics(_gpu_util(values).decode()), 0.1 * k)
        assert sorted(r.gpu for r in out) == [0, 1, 2, 3]
    # Nothing changed on any GPU: no new sample of any.
    assert source.readings(parse_dcgm_metrics(_gpu_util(values).decode()), 2.05) == []


def test_endpoint_down_is_unavailable_with_the_reason(exporter: _Exporter) -> None:
    url = exporter.url
    exporter.close()
    cfg = DcgmExporterConfig(enabled=True, url=url, timeout_s=0.5)
    with pytest.raises(SourceUnavailable, match="Connection refused"):
        _collect(DcgmExporterSource(cfg, clock=MonotonicClock()), 1)


def test_http_error_and_garbage_are_source_errors(exporter: _Exporter) -> None:
    cfg = DcgmExporterConfig(enabled=True, url=exporter.url)
    exporter.status = 503
    with pytest.raises(SourceError, match="HTTP 503"):
        _collect(DcgmExporterSource(cfg, clock=MonotonicClock()), 1)
    exporter.status = 200
    exporter.body = b"<html>proxy error</html>"
    with pytest.raises(SourceError, match="not a Prometheus exposition"):
        _collect(DcgmExporterSource(cfg, clock=MonotonicClock()), 1)


def test_exposition_without_activity_fields_says_which_to_enable(exporter: _Exporter) -> None:
    exporter.body = b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n'
    cfg = DcgmExporterConfig(enabled=True, url=exporter.url)
    with pytest.raises(SourceUnavailable, match="DCGM_FI_PROF_SM_ACTIVE"):
        _collect(DcgmExporterSource(cfg, clock=MonotonicClock()), 1)


def test_series_relabelled_away_from_a_gpu_number_say_so(exporter: _Exporter) -> None:
    """A relabelled exporter (gpu="GPU-<uuid>", or no gpu label): the fields are there but no
    series names a GPU; the source said to enable a field that was already enabled."""
    exporter.body = (
        b'DCGM_FI_PROF_SM_ACTIVE{gpu="GPU-3f2a",UUID="GPU-3f2a"} 0.5\n'
        b'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-3f2a"} 40\n'
    )
    cfg = DcgmExporterConfig(enabled=True, url=exporter.url)
    with pytest.raises(SourceUnavailable, match="none of its 2 GPU activity series has a numeric"):
        _collect(DcgmExporterSource(cfg, clock=MonotonicClock()), 1)


def test_gpus_without_a_field_in_common_are_unavailable_with_the_reason(
    exporter: _Exporter,
) -> None:
    # One GPU in MIG mode with profiling fields only, the other with utilization only: no
    # signal compares them, and the source used to emit empty readings without a word.
    exporter.body = b'DCGM_FI_PROF_SM_ACTIVE{gpu="0"} 0.5\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 40\n'
    cfg = DcgmExporterConfig(enabled=True, url=exporter.url)
    with pytest.raises(SourceUnavailable, match="2 GPUs have no activity field in common"):
        _collect(DcgmExporterSource(cfg, clock=MonotonicClock()), 1)


def test_bad_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sources\.dcgm_exporter\.url"):
        DcgmExporterConfig(url="localhost:9400")


# --------------------------------------------------------------------------------------------
# NVML


def test_nvml_without_a_driver_is_unavailable_with_nvmls_reason() -> None:
    """The real nvidia-ml-py on a host without the NVIDIA driver (this one)."""
    source = NvmlGpuSource(NvmlConfig(enabled=True), clock=MonotonicClock())
    with pytest.raises(SourceUnavailable, match="NVML cannot start: NVML Shared Library Not Found"):
        asyncio.run(source.run(lambda r: None))


def test_nvml_without_the_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    source = NvmlGpuSource(NvmlConfig(enabled=True), clock=MonotonicClock())
    with pytest.raises(SourceUnavailable, match=r"pip install 'commpulse\[nvml\]'"):
        asyncio.run(source.run(lambda r: None))


class _Driver:
    """Stands in for libnvidia-ml behind pynvml's Python API (structures, constants and error
    classes are pynvml's own)."""

    def __init__(self, gpus: int, *, gpm: bool) -> None:
        self.gpus = gpus
        self.gpm = gpm
        self.util_samples: dict[int, list[tuple[int, int]]] = {g: [] for g in range(gpus)}
        self.gpm_values: dict[int, tuple[float, float, float]] = {}
        self.gpm_fail: set[int] = set()
        self.lost: set[int] = set()
        self.calls: list[str] = []
        self.last_sampled = 0

    def module(self) -> types.ModuleType:
        m = types.ModuleType("pynvml")
        m.__dict__.update({k: v for k, v in vars(pynvml).items() if not k.startswith("nvml")})
        d = self

        def err(code: int) -> None:
            raise pynvml.NVMLError(code)

        def check(handle: int) -> None:
            if handle in d.lost:
                err(pynvml.NVML_ERROR_GPU_IS_LOST)

        def samples(handle: int, kind: int, since: int) -> tuple[int, list[Any]]:
            check(handle)
            assert kind == pynvml.NVML_GPU_UTILIZATION_SAMPLES
            new = [(ts, v) for ts, v in d.util_samples[handle] if ts > since]
            if not new:
                err(pynvml.NVML_ERROR_NOT_FOUND)
            out = []
            for ts, v in new:
                s = pynvml.c_nvmlSample_t()
                s.timeStamp = ts
                s.sampleValue.uiVal = v
                out.append(s)
            return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, out

        def support(handle: int) -> Any:
            s = pynvml.c_nvmlGpmSupport_t()
            s.isSupportedDevice = 1 if d.gpm else 0
            return s

        def sample_get(handle: int, sample: Any) -> Any:
            check(handle)
            d.last_sampled = handle  # the next metrics request is about this GPU
            return sample

        metric_ids = (
            pynvml.NVML_GPM_METRIC_SM_UTIL,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
        )

        def metrics_get(request: Any) -> Any:
            assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
            handle = d.last_sampled
            values = dict(zip(metric_ids, d.gpm_values[handle], strict=True))
            failed = handle in d.gpm_fail
            for i in range(request.numMetrics):
                metric = request.metrics[i]
                metric.value = values[metric.metricId]
                metric.nvmlReturn = (
                    pynvml.NVML_ERROR_NOT_SUPPORTED if failed else pynvml.NVML_SUCCESS
                )
            return request

        def handle_by_index(i: int) -> int:
            return i

        m.nvmlInit = lambda: d.calls.append("init")
        m.nvmlShutdown = lambda: d.calls.append("shutdown")
        m.nvmlDeviceGetCount = lambda: d.gpus
        m.nvmlDeviceGetHandleByIndex = handle_by_index
        m.nvmlDeviceGetSamples = samples
        m.nvmlGpmQueryDeviceSupport = support
        m.nvmlGpmSampleAlloc = pynvml.c_nvmlGpmSample_t
        m.nvmlGpmSampleFree = lambda s: d.calls.append("gpm_free")
        m.nvmlGpmSampleGet = sample_get
        m.nvmlGpmMetricsGet = metrics_get
        return m


def _open(
    driver: _Driver, config: NvmlConfig, clock: FakeClock
) -> tuple[NvmlGpuSource, Any, list[Any]]:
    nvml = driver.module()
    source = NvmlGpuSource(config, clock=clock, nvml=nvml)
    gpus = source._open(nvml)  # the sweep is tested without the sampling thread
    return source, nvml, gpus


def test_utilization_samples_keep_the_drivers_timestamps() -> None:
    driver = _Driver(2, gpm=False)
    clock = FakeClock(1000.0)
    source, nvml, gpus = _open(driver, NvmlConfig(enabled=True), clock)
    assert source.mode == "util"
    now_us = int(time.time() * 1e6)
    for g in gpus:  # as if the source had started a second ago
        g.last_ts_us = now_us - 1_000_000
    driver.util_samples[0] = [
        (now_us - 500_000, 100),
        (now_us - 333_000, 97),
        (now_us - 166_000, 12),
    ]
    driver.util_samples[1] = [(now_us - 200_000, 0)]
    readings = [r for r in source.sweep(nvml, gpus) if isinstance(r, GpuReading)]
    assert [(r.gpu, r.signals["util"]) for r in readings] == [
        (0, 1.0),
        (0, 0.97),
        (0, 0.12),
        (1, 0.0),
    ]
    # 0.5 s, 0.333 s and 0.166 s ago on the agent's clock (wall-clock µs carried over)
    ages = [clock.now() - r.time_s for r in readings[:3]]
    assert ages == pytest.approx([0.5, 0.333, 0.166], abs=0.05)
    # nothing new: NVML says NOT_FOUND, which is no sample rather than an error
    assert source.sweep(nvml, gpus) == []


def test_gpm_gives_sm_and_tensor_activity_over_each_interval() -> None:
    driver = _Driver(2, gpm=True)
    driver.gpm_values = {0: (85.0, 62.5, 99.0), 1: (3.0, 0.0, 100.0)}
    clock = FakeClock()
    source, nvml, gpus = _open(driver, NvmlConfig(enabled=True), clock)
    assert source.mode == "gpm"
    clock.advance(0.1)
    readings = source.sweep(nvml, gpus)
    assert [r.signals for r in readings if isinstance(r, GpuReading)] == [
        {"sm_active": 0.85, "tensor_active": 0.625, "gr_engine_active": 0.99},
        {"sm_active": 0.03, "tensor_active": 0.0, "gr_engine_active": 1.0},
    ]
    assert all(isinstance(r, GpuReading) and r.time_s == clock.now() for r in readings)
    # an interval GPM could not measure gives no sample, not a zero
    driver.gpm_fail = {1}
    assert [r.gpu for r in source.sweep(nvml, gpus) if isinstance(r, GpuReading)] == [0]


def test_gpm_switched_off_or_unsupported_falls_back_to_utilization() -> None:
    assert (
        _open(_Driver(1, gpm=True), NvmlConfig(enabled=True, gpm=False), FakeClock())[0].mode
        == "util"
    )
    assert _open(_Driver(1, gpm=False), NvmlConfig(enabled=True), FakeClock())[0].mode == "util"


def test_a_lost_gpu_is_dropped_and_the_others_go_on() -> None:
    driver = _Driver(2, gpm=True)
    driver.gpm_values = {0: (50.0, 40.0, 90.0), 1: (50.0, 40.0, 90.0)}
    source, nvml, gpus = _open(driver, NvmlConfig(enabled=True), FakeClock())
    driver.lost = {1}  # Xid 79: fell off the bus
    assert [r.gpu for r in source.sweep(nvml, gpus) if isinstance(r, GpuReading)] == [0]
    assert [r.gpu for r in source.sweep(nvml, gpus) if isinstance(r, GpuReading)] == [0]
    driver.lost = {0, 1}
    with pytest.raises(SourceError, match="every GPU is lost"):
        source.sweep(nvml, gpus)


def test_asking_for_a_gpu_the_host_does_not_have_is_unavailable() -> None:
    driver = _Driver(2, gpm=False)
    nvml = driver.module()
    source = NvmlGpuSource(NvmlConfig(enabled=True, devices=(0, 5)), clock=FakeClock(), nvml=nvml)
    with pytest.raises(SourceUnavailable, match=r"no GPU \[5\] \(this host has 2: 0..1\)"):
        source._open(nvml)
    assert driver.calls[-1] == "shutdown"  # NVML is released on the way out


def test_the_source_runs_in_the_sampler_and_releases_nvml_when_cancelled() -> None:
    driver = _Driver(1, gpm=True)
    driver.gpm_values = {0: (70.0, 50.0, 95.0)}
    source = NvmlGpuSource(
        NvmlConfig(enabled=True, poll_interval_s=0.02), clock=MonotonicClock(), nvml=driver.module()
    )

    async def main() -> list[Reading]:
        out: list[Reading] = []
        task = asyncio.create_task(source.run(out.append))
        while len(out) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return out

    readings = asyncio.run(main())
    assert all(isinstance(r, GpuReading) and r.signals["sm_active"] == 0.7 for r in readings)
    assert driver.calls.count("gpm_free") == 2
    assert driver.calls[-1] == "shutdown"


# --------------------------------------------------------------------------------------------
# configuration


def test_two_gpu_sources_at_once_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[sources.nvml]\nenabled = true\n[sources.dcgm_exporter]\nenabled = true\n")
    with pytest.raises(ConfigError, match="nvml and dcgm_exporter are both enabled"):
        load_config(cfg)


def test_gpu_source_sections_load_from_toml(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[sources.nvml]\nenabled = true\ndevices = [0, 3]\npoll_interval_s = 0.2\n")
    config = load_config(cfg)
    assert config.sources.nvml.devices == (0, 3)
    assert ctypes.sizeof(pynvml.c_nvmlSample_t) > 0  # the real structures are importable here


def test_lower_case_field_names_are_read() -> None:
    # As a relabelled exporter printed them (NVIDIA/dcgm-exporter#272, an A100 in MIG mode).
    text = (
        'dcgm_fi_prof_gr_engine_active{gpu="0",uuid="GPU-ed13",device="nvidia0",'
        'modelName="NVIDIA A100-SXM4-40GB",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",'
        'container_name="",pod_name="",pod_namespace=""} 0.250000\n'
    )
    scrape = parse_dcgm_metrics(text)
    assert scrape.gpus[0]["gr_engine_active"] == pytest.approx(0.25)


def test_a_followed_gpu_csv_on_the_hosts_wall_clock_keeps_its_stamps(tmp_path: Path) -> None:
    """Rows stamped in epoch seconds, read late (a poll, a recorder's flush): placed at their
    stamps on the agent's clock, not at the least read delay after them (a live probe's GPU
    samples landed 0-0.5 s late, and the exposed share read 0.069-0.000 against 0.15)."""
    from collectors.gpu_csv import GpuCsvConfig, GpuCsvSource
    from tests.sources import collect_until

    wall = 1.7e9
    path = tmp_path / "gpu.csv"
    path.write_text("time,gpu,sm_active\n" + "".join(
        f"{wall + 99.0 + 0.1 * k:.3f},0,0.5\n" for k in range(5)
    ))  # fmt: skip
    clock = FakeClock(100.0, wall_offset=wall)
    source = GpuCsvSource(GpuCsvConfig(enabled=True, path=path, mode="follow"), clock=clock)
    out = asyncio.run(collect_until(source, GpuReading, 5))
    times = [r.time_s for r in out if isinstance(r, GpuReading)]
    assert times == pytest.approx([99.0 + 0.1 * k for k in range(5)], abs=1e-3)
