"""The ``commpulse`` command line.

Subcommands import their machinery lazily, so ``commpulse --help`` and the light commands
start fast. Every :class:`agent.errors.CommpulseError` becomes one line on stderr and exit
status 1; usage errors exit 2 (argparse's convention).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent import __version__
from agent.defaults import DEFAULT_PORT
from agent.errors import CommpulseError, ConfigError, ExportError
from agent.threads import single_blas_thread

if TYPE_CHECKING:
    from agent.config import Config

__all__ = ["DEFAULT_PORT", "build_parser", "main", "parse_quantity"]

log = logging.getLogger(__name__)


_UNITS = {
    "": 1.0,
    "k": 1e3,
    "m": 1e6,
    "g": 1e9,
    "t": 1e12,
    "ki": 2.0**10,
    "mi": 2.0**20,
    "gi": 2.0**30,
    "ti": 2.0**40,
}
_QUANTITY = re.compile(
    r"^\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<prefix>[kKmMgGtT]i?)?"
    r"(?P<unit>b|B|bit|bits|bps)?(?:/s)?\s*$"
)


def parse_quantity(text: str) -> float:
    """Bytes or bytes/s from ``20e9``, ``20G``, ``20GB``, ``16GiB``, ``25GB/s`` or ``200Gbit``.

    Decimal prefixes are powers of 1000 (as link rates are quoted), ``Ki``/``Mi``/``Gi`` powers
    of 1024; a ``bit`` suffix (or lower-case ``b``) divides by 8.
    """
    m = _QUANTITY.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a quantity (examples: 20e9, 20GB, 16GiB, 25GB/s, 200Gbit)"
        )
    value = float(m.group("num")) * _UNITS[(m.group("prefix") or "").lower()]
    unit = m.group("unit") or ""
    if unit in ("b", "bit", "bits", "bps"):
        value /= 8.0
    return value


def _number(text: str, *, allow_zero: bool) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or not (v >= 0 if allow_zero else v > 0):
        need = "must not be negative" if allow_zero else "must be positive"
        raise argparse.ArgumentTypeError(f"{text!r} {need}")
    return v


def _positive_float(text: str) -> float:
    return _number(text, allow_zero=False)


def _fraction(text: str) -> float:
    """A non-negative number (fractions of B or of T; the simulator checks upper bounds)."""
    return _number(text, allow_zero=True)


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return v


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="write a synthetic job (counters, GPU, NCCL log, truth) with known T, B, D",
        description=(
            "Simulate a job with ground truth by construction and write counters.csv, gpu.csv, "
            "nccl.log, truth.json (and capture.pcap with --pcap) into --out. The defaults "
            "reproduce the DOMAIN.md worked example: N=32 ranks, S=20 GB AllReduce per step, "
            "25 GB/s, 3 s compute, so T = 4.55 s and D = 0.34."
        ),
        epilog=(
            "Training is given either by --size/--compute (T and D follow from the AllReduce "
            "formula) or by --period/--duty (S follows). Quantities accept units: 20GB, "
            "16GiB, 25GB/s, 200Gbit."
        ),
    )
    p.add_argument(
        "--scenario",
        choices=("training", "finetune", "inference", "idle"),
        default="training",
        help="workload to simulate (default: training)",
    )
    p.add_argument("--out", type=Path, required=True, help="output directory (created)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--duration",
        type=_positive_float,
        metavar="S",
        help="seconds to simulate (default: 20 periods, at least 60 s)",
    )
    g = p.add_argument_group("job")
    g.add_argument("--nranks", type=int, default=32, metavar="N", help="world size (default 32)")
    g.add_argument(
        "--size",
        type=parse_quantity,
        metavar="BYTES",
        help="S: AllReduce bytes per step (training) or model bytes (finetune); default 20GB",
    )
    g.add_argument(
        "--bandwidth",
        type=parse_quantity,
        default=25e9,
        metavar="BYTES/S",
        help="B: link rate during a collective (default 25GB/s = 200 Gb/s)",
    )
    g.add_argument(
        "--compute",
        type=_fraction,
        metavar="S",
        help="compute seconds per step (training; default 3)",
    )
    g.add_argument("--period", type=_positive_float, metavar="S", help="T: step time in seconds")
    g.add_argument(
        "--duty",
        type=_positive_float,
        metavar="D",
        help="D: fraction of a step the link is busy, 0..1",
    )
    g.add_argument(
        "--overlap",
        type=_fraction,
        default=0.0,
        help="training: share of the link-busy time hidden behind the backward pass (DDP "
        "buckets); the exposed D is (1 - overlap) of it (default 0)",
    )
    g.add_argument(
        "--jitter",
        type=_fraction,
        default=0.01,
        help="std of a step's duration as a fraction of T (default 0.01)",
    )
    g.add_argument(
        "--drift", type=float, default=0.0, help="relative change of T over the run (default 0)"
    )
    g.add_argument(
        "--local-ranks",
        type=int,
        default=1,
        metavar="K",
        help="GPUs (and NICs) on this host (default 1)",
    )
    g.add_argument(
        "--buckets", type=int, default=16, help="AllReduce calls per step (training, default 16)"
    )
    g.add_argument("--layers", type=int, default=32, help="layers (finetune, default 32)")
    g.add_argument(
        "--layer-compute",
        type=_positive_float,
        metavar="S",
        help="forward compute per layer in seconds (finetune, default 0.01)",
    )
    g.add_argument(
        "--optimizer",
        type=_fraction,
        metavar="S",
        help="optimizer step in seconds (finetune, default 0.3)",
    )
    g.add_argument(
        "--arrival-rate",
        type=_positive_float,
        metavar="HZ",
        help="requests per second (inference, default 2)",
    )
    g.add_argument(
        "--arrival-process",
        choices=("poisson", "mmpp"),
        help="request arrivals (inference): poisson (default) or mmpp, bursty episodes of "
        "--burstiness x the mean rate separated by silences",
    )
    g.add_argument(
        "--burstiness",
        type=_positive_float,
        metavar="F",
        help="rate inside an mmpp episode over the mean rate (inference, default 5; > 1)",
    )
    g.add_argument("--tokens", type=int, help="tokens per request batch (inference, default 2048)")
    g.add_argument("--hidden", type=int, help="hidden size (inference, default 4096)")
    g.add_argument("--moe-layers", type=int, help="MoE layers (inference, default 16)")
    s = p.add_argument_group("sampling")
    s.add_argument(
        "--sample-rate",
        type=_positive_float,
        default=100.0,
        metavar="HZ",
        help="counter polls per second (default 100)",
    )
    s.add_argument(
        "--noise",
        type=_fraction,
        metavar="FRAC",
        help="σ of background traffic per poll as a fraction of B (default 0.02)",
    )
    s.add_argument(
        "--background",
        type=_fraction,
        metavar="FRAC",
        help="mean background traffic as a fraction of B (default 0.01)",
    )
    s.add_argument(
        "--poll-jitter",
        type=_fraction,
        default=0.0,
        metavar="FRAC",
        help="poll-time jitter as a fraction of the poll interval (default 0)",
    )
    s.add_argument(
        "--missing",
        type=_fraction,
        default=0.0,
        metavar="FRAC",
        help="fraction of polls lost (default 0)",
    )
    s.add_argument(
        "--gpu-interval",
        type=_positive_float,
        default=0.1,
        metavar="S",
        help="GPU sampling interval (default 0.1 s, DCGM's floor)",
    )
    s.add_argument(
        "--counter-bits",
        type=int,
        choices=(32, 64),
        default=64,
        help="counter width; 32 makes the counters wrap (default 64)",
    )
    s.add_argument(
        "--pcap",
        action="store_true",
        help="also write capture.pcap (RoCEv2 frames; needs scapy, keep B·duration "
        "small: one frame per 4 kB)",
    )
    s.add_argument("--hostname", default="gpu-node-01", help="host name in the NCCL log")


def _add_analyze(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "analyze",
        help="estimate T, B, D, regime and collective mix from recorded files",
        description=(
            "Read recorded files in the contract formats and print the parameter table "
            "(or, with --json, the contract's JSON object). Give each option as often as "
            "needed; several counter files are summed per direction on their common time span. "
            "--plot writes a picture of the same analysis in addition to the output."
        ),
    )
    p.add_argument(
        "--counters",
        type=Path,
        action="append",
        default=[],
        metavar="F",
        help="counters CSV: time,<col>... cumulative bytes (tx/rx in the name)",
    )
    p.add_argument(
        "--gpu",
        type=Path,
        action="append",
        default=[],
        metavar="F",
        help="GPU CSV: nvidia-smi --query-gpu=timestamp,index,utilization.gpu "
        "--format=csv output, or time,gpu,sm_active,...",
    )
    p.add_argument(
        "--nccl-log",
        type=Path,
        action="append",
        default=[],
        metavar="F",
        help="NCCL_DEBUG=INFO log (COLL lines; timestamps give T from the log)",
    )
    p.add_argument(
        "--pcap",
        type=Path,
        action="append",
        default=[],
        metavar="F",
        help="pcap or pcapng capture (original frame lengths are counted)",
    )
    p.add_argument(
        "--inspector",
        type=Path,
        action="append",
        default=[],
        metavar="F",
        help="NCCL Inspector plugin dump (<dir>/<host>-pid<pid>.log, JSONL; NCCL >= 2.28): "
        "GPU-timed latency and bus bandwidth per collective",
    )
    p.add_argument("--json", action="store_true", help="print the JSON object instead of a table")
    p.add_argument(
        "--table",
        choices=("csv", "json", "md"),
        help="print the capacity-planning parameter table instead (S, N, T, B, D, V, mix; one "
        "row for the job, one per NCCL communicator, one per --what-if)",
    )
    p.add_argument(
        "--collective-latency",
        type=_positive_float,
        metavar="S",
        help="per-collective latency in seconds for the fine-tuning latency share (default: "
        "the Inspector's measured P50 when --inspector is given, else 1e-5, DOMAIN.md's 10 µs)",
    )
    p.add_argument(
        "--what-if",
        action="append",
        default=[],
        metavar="SPEC",
        help="a row predicting T and D after a change, with the DOMAIN.md formulas: "
        "nranks=N, bandwidth=xF or B/s, size=xF (collective bytes), compute=xF; comma-"
        "separated to combine, repeat for more rows (e.g. --what-if nranks=128,bandwidth=x0.5)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="also draw the analysis into this image file (.png; .svg and .pdf by suffix): "
        "the bandwidth with the detected bursts shaded and a marker every T, the GPU signal, "
        "the T/B/D box, and the autocorrelation that chose T. Needs the plot extra: "
        "pip install 'commpulse[plot]'",
    )


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="run the live pipeline on a simulated job and serve /metrics",
        description=(
            "Run the real live pipeline (sources → windows → estimator → Prometheus exporter) "
            "on a simulated job in real time. No GPU, NIC or NCCL needed. Prints a one-line "
            "summary every second; Ctrl-C stops it."
        ),
    )
    p.add_argument(
        "--scenario",
        choices=("training", "finetune", "inference", "idle"),
        default="training",
        help="simulated workload (default training)",
    )
    p.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port for /metrics (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    p.add_argument(
        "--listen", default="127.0.0.1", metavar="ADDR", help="address to bind (default 127.0.0.1)"
    )
    p.add_argument(
        "--duration",
        type=_positive_float,
        metavar="S",
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the simulated job")
    p.add_argument("--period", type=_positive_float, metavar="S", help="override T (training)")
    p.add_argument("--duty", type=_positive_float, metavar="D", help="override D (training)")
    p.add_argument("--quiet", action="store_true", help="do not print the summary line")


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run the agent as a service (sources, /metrics, MQTT) from a config file",
        description=(
            "Run the agent until SIGTERM/SIGINT. SIGHUP re-reads the configuration (an invalid "
            "file is logged and ignored). Under systemd it speaks sd_notify (Type=notify, "
            "WatchdogSec). Reference of every key: docs/config.md."
        ),
    )
    p.add_argument(
        "--config",
        type=Path,
        required=True,
        metavar="FILE",
        help="TOML configuration (example: deploy/config/commpulse.toml)",
    )


def _add_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "validate",
        help="check a configuration file; exit 0 when valid",
        description=(
            "Parse and check a configuration file: unknown keys, wrong types, out-of-range "
            "values and missing files are reported with their dotted key. Exit status 0 when "
            "valid, 1 otherwise (systemd runs it as ExecStartPre and before a reload)."
        ),
    )
    p.add_argument("file", type=Path, metavar="FILE", help="TOML configuration file")


def _add_record(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "record",
        help="record the configured sources' raw samples (replayable by analyze)",
        description=(
            "Write the raw samples of the sources configured in FILE into --out: "
            "counters_<source>.csv, gpu.csv and nccl.log, in the formats analyze reads. "
            "Stops after --duration or on Ctrl-C."
        ),
    )
    p.add_argument(
        "--compress",
        action="store_true",
        help="gzip every file (.gz added to its name; analyze reads it as it is)",
    )
    p.add_argument("--config", type=Path, required=True, metavar="FILE", help="TOML configuration")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    p.add_argument(
        "--duration", type=_positive_float, required=True, metavar="S", help="seconds to record"
    )


def _add_wrap(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "wrap",
        help="run a job with the NCCL logging the agent tails",
        description=(
            "Run CMD with NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV,COLL,NET, "
            "NCCL_DEBUG_FILE=<log dir>/nccl.%%h.%%p.log and microsecond INFO timestamps "
            "(NCCL >= 2.26), keeping any of these the environment already sets. CMD replaces "
            "this process: its signals and exit status are unchanged."
        ),
        epilog="example: commpulse wrap -- torchrun --nproc-per-node 8 train.py",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        metavar="DIR",
        help="where NCCL writes (default: the directory the --config tails, else /var/log/nccl)",
    )
    p.add_argument(
        "--config", type=Path, metavar="FILE", help="the agent's configuration (for the log dir)"
    )
    p.add_argument("--quiet", action="store_true", help="do not print where the logs go")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="commpulse",
        description=(
            "Per-host telemetry of collective-communication traffic on GPU clusters: sync "
            "period T, burst bandwidth B, duty cycle D (D > 0.5: the network is the "
            "bottleneck), workload regime and collective mix."
        ),
        epilog=f"Start with: commpulse demo   (then curl localhost:{DEFAULT_PORT}/metrics)",
    )
    parser.add_argument("--version", action="version", version=f"commpulse {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more log output (-vv for debug); run logs its events (start, reload, re-lock) "
        "at info level by default, the other commands warnings only",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_demo(sub)
    _add_run(sub)
    _add_validate(sub)
    _add_analyze(sub)
    _add_simulate(sub)
    _add_record(sub)
    _add_wrap(sub)
    return parser


def _cmd_simulate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from agent.simulator.files import simulate_to_dir
    from agent.simulator.params import JobParams

    params = JobParams(scenario=args.scenario, seed=args.seed)
    overrides = {
        "duration_s": args.duration,
        "nranks": args.nranks,
        "size_bytes": args.size,
        "bandwidth": args.bandwidth,
        "compute_s": args.compute,
        "period_s": args.period,
        "duty": args.duty,
        "overlap": args.overlap,
        "jitter": args.jitter,
        "drift": args.drift,
        "local_ranks": args.local_ranks,
        "buckets": args.buckets,
        "layers": args.layers,
        "layer_compute_s": args.layer_compute,
        "optimizer_s": args.optimizer,
        "arrival_rate_hz": args.arrival_rate,
        "arrival_process": args.arrival_process,
        "burstiness": args.burstiness,
        "tokens": args.tokens,
        "hidden": args.hidden,
        "moe_layers": args.moe_layers,
        "sample_rate_hz": args.sample_rate,
        "noise": args.noise,
        "background": args.background,
        "poll_jitter": args.poll_jitter,
        "missing": args.missing,
        "gpu_interval_s": args.gpu_interval,
        "counter_bits": args.counter_bits,
        "hostname": args.hostname,
    }
    if (args.period is not None or args.duty is not None) and (
        args.size is not None or args.compute is not None
    ):
        raise ConfigError("give either --size/--compute or --period/--duty, not both")
    params = replace(params, **{k: v for k, v in overrides.items() if v is not None})
    truth = simulate_to_dir(params, args.out, pcap=args.pcap)
    period = truth.get("period_s")
    duty = truth.get("duty_cycle")
    t_text = "none" if period is None else f"{period:.4g} s"
    d_text = "none" if duty is None else f"{duty:.3f}"
    print(
        f"wrote {', '.join(truth['files'])}, truth.json to {args.out}  "
        f"(scenario {args.scenario}: T={t_text}, D={d_text})"
    )
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from agent.analyze import analyze_files
    from agent.report import render_table
    from agent.table import parse_what_if, planning_rows, render_rows

    if not (args.counters or args.gpu or args.nccl_log or args.pcap or args.inspector):
        raise ConfigError(
            "nothing to analyze: give --counters, --gpu, --nccl-log, --pcap or --inspector"
        )
    if args.json and args.table:
        raise ConfigError("give --json or --table, not both (--table json is the table as JSON)")
    if args.what_if and not args.table:
        raise ConfigError("--what-if adds rows to the parameter table: give --table csv|json|md")
    what_ifs = [parse_what_if(spec) for spec in args.what_if]
    if args.plot is not None:
        from agent.plot import check_plot_target

        check_plot_target(args.plot)  # before the analysis: a missing directory fails fast
    result = analyze_files(
        counters=args.counters,
        gpu=args.gpu,
        nccl_logs=args.nccl_log,
        pcaps=args.pcap,
        inspector=args.inspector,
        collective_latency_s=args.collective_latency,
    )
    if args.table:
        comms = result.extra.get("nccl", {}).get("communicators", [])
        timing = result.extra.get("inspector", {}).get("ops", {})
        rows = planning_rows(
            result.estimate,
            communicators=comms,
            what_ifs=what_ifs,
            inspector_ops=timing,
            arrivals=result.extra.get("arrivals"),
            alltoall=result.extra.get("alltoall"),
            pipeline=result.extra.get("pipeline"),
            sharding=result.extra.get("sharding"),
            capture=result.extra.get("capture"),
        )
        print(render_rows(rows, args.table))
    elif args.json:
        out = result.estimate.to_json()
        out["sources"] = result.sources
        out.update(result.extra)
        print(json.dumps(out, indent=2))
    else:
        print(render_table(result.estimate, sources=result.sources, extra=result.extra))
    if args.plot is not None:
        from agent.plot import write_plot

        write_plot(result, args.plot)
        print(f"commpulse analyze: plot written to {args.plot}", file=sys.stderr)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from agent.demo import run_demo

    return run_demo(
        scenario=args.scenario,
        listen=args.listen,
        port=args.port,
        duration_s=args.duration,
        seed=args.seed,
        period_s=args.period,
        duty=args.duty,
        quiet=args.quiet,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from agent.daemon import run_daemon

    return run_daemon(args.config)


def _check_tls_files(config: Config) -> None:
    """Load the TLS files as ``run`` will.

    A file that exists but holds no usable certificate or key passed validation (systemd's
    ExecStartPre), and the service then failed to start, in a loop.
    """
    from agent.http import tls_context
    from agent.sinks import mqtt_tls

    prom = config.exporters.prometheus
    if prom.enabled and prom.tls_cert_file is not None and prom.tls_key_file is not None:
        try:
            tls_context(prom.tls_cert_file, prom.tls_key_file, client_ca=prom.client_ca_file)
        except ExportError as exc:
            raise ConfigError(f"exporters.prometheus: {exc}") from None
    if config.exporters.mqtt.enabled:
        try:
            mqtt_tls(config.exporters.mqtt)
        except ExportError as exc:
            raise ConfigError(str(exc)) from None


def _cmd_validate(args: argparse.Namespace) -> int:
    from agent.config import load_config

    config = load_config(args.file)
    _check_tls_files(config)
    sources = [name for name in config.sources.names() if getattr(config.sources, name).enabled]
    prom = config.exporters.prometheus
    exporters = []
    if prom.enabled:
        scheme = "https" if prom.tls_cert_file else "http"
        exporters.append(f"prometheus {scheme}://{prom.listen_address}:{prom.port}/metrics")
    if config.exporters.mqtt.enabled:
        m = config.exporters.mqtt
        exporters.append(f"mqtt {m.host}:{m.port} ({m.topic_prefix}/<host>/estimate)")
    print(
        f"{args.file}: valid; sources: {', '.join(sources)}; "
        f"exporters: {', '.join(exporters) or 'none'}"
    )
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    import asyncio

    from agent.config import load_config
    from agent.record import record

    config = load_config(args.config)
    rows = asyncio.run(record(config, args.out, args.duration, compress=args.compress))
    summary = ", ".join(f"{name}: {n} rows" for name, n in sorted(rows.items())) or "nothing"
    print(f"recorded into {args.out}: {summary}")
    return 0


def _cmd_wrap(args: argparse.Namespace) -> int:
    from agent.wrap import run_wrapped

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    return run_wrapped(command, log_dir=args.log_dir, config=args.config, quiet=args.quiet)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``commpulse`` console script."""
    single_blas_thread()  # before anything imports numpy
    parser = build_parser()
    args = parser.parse_args(argv)
    # The daemon says what it does (start, stop, reload, re-lock: events, not per hop) in the
    # journal by default; the one-shot commands only warn.
    base = logging.INFO if args.command == "run" else logging.WARNING
    level = max(logging.DEBUG, base - 10 * min(args.verbose, 2))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    commands = {
        "simulate": _cmd_simulate,
        "analyze": _cmd_analyze,
        "demo": _cmd_demo,
        "run": _cmd_run,
        "validate": _cmd_validate,
        "record": _cmd_record,
        "wrap": _cmd_wrap,
    }
    try:
        return commands[args.command](args)
    except CommpulseError as exc:
        print(f"commpulse {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
