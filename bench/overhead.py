"""What the agent costs a GPU node: CPU and peak RSS of `commpulse run` under a realistic load.

Run:  .venv/bin/python bench/overhead.py [--seconds 60]   (needs mosquitto on PATH or /usr/sbin)

Load, replayed by a separate writer process while the daemon runs (the writer's own CPU is not
counted):

* 8 RDMA ports (a fake mlx5 sysfs tree) whose data counters follow a square wave, polled by
  the agent at 100 Hz;
* 8 GPUs at 10 Hz appended to a GPU CSV the agent follows;
* 5,000 NCCL COLL lines per second appended to a log the agent tails;
* MQTT on (a local Mosquitto), and one /metrics scrape per second.

Measured from /proc after a 10 s warm-up: CPU time of the daemon process (all threads) over
``--seconds`` as a percentage of one core, and its peak RSS (VmHWM). Baselines from the same
run: an empty 100 Hz wake-up loop (the floor of any 100 Hz poller on this machine), and the
RSS of a Python process that only imports the agent's libraries.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "mlx5-host" / "sys"
TICKS = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _make_tree(root: Path, ports: int) -> list[Path]:
    src = (FIXTURE / "class" / "infiniband" / "mlx5_0").resolve()
    files = []
    (root / "class" / "infiniband").mkdir(parents=True)
    (root / "class" / "net").mkdir(parents=True)
    for i in range(ports):
        dev = root / "devices" / f"mlx5_{i}"
        shutil.copytree(src, dev)
        os.symlink(dev, root / "class" / "infiniband" / f"mlx5_{i}")
        counters = dev / "ports" / "1" / "counters"
        files += [counters / "port_xmit_data", counters / "port_rcv_data"]
    return files


def _writer(files: list[str], log: str, gpu: str, stop: mp.synchronize.Event) -> None:
    """The job: counters (square wave T=1 s, D=0.3), 8 GPUs at 10 Hz, 5 k NCCL lines/s."""
    t0 = time.monotonic()
    fds = [os.open(f, os.O_WRONLY) for f in files]
    line = (
        "] node1:4242:4242 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f0000000000 "
        "recvbuff 0x7f0000000000 count 65536 datatype 7 op 0 root 0 comm 0x55aa00000000 "
        "[nranks=64] stream 0x55bb00000000\n"
    )
    with open(log, "a") as lf, open(gpu, "a") as gf:
        gf.write("time,gpu,sm_active\n")
        next_gpu = 0.0
        sent = 0
        while not stop.is_set():
            t = time.monotonic() - t0
            k, phase = divmod(t, 1.0)
            on = k * 0.3 + min(phase, 0.3)
            words = str(2_500_000_000_000 + int(2.5e9 * on / 4)).encode() + b"\n"
            for fd in fds:
                os.pwrite(fd, words, 0)
            due = int(t * 5000)
            if due > sent:
                stamp = dt.datetime.now(dt.UTC).strftime("[%Y-%m-%d %H:%M:%S.%f")
                lf.write((stamp + line) * (due - sent))
                lf.flush()
                sent = due
            if t >= next_gpu:
                next_gpu += 0.1
                sm = 0.12 if phase < 0.3 else 0.85
                now = time.time()
                gf.write("".join(f"{now:.6f},{g},{sm:.3f}\n" for g in range(8)))
                gf.flush()
            time.sleep(0.002)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _hwm_mb(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1]) / 1024
    return float("nan")


def _empty_loop_cpu(seconds: float) -> float:
    code = (
        "import time\nt0=time.monotonic();k=0\n"
        f"while time.monotonic()-t0<{seconds}:\n k+=1;d=t0+k*0.01-time.monotonic()\n"
        " time.sleep(d) if d>0 else None\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(seconds / 2)
    cpu = _cpu_seconds(proc.pid)
    proc.wait()
    return 100.0 * cpu / (seconds / 2)


def _import_rss() -> float:
    code = (
        "import numpy, prometheus_client, aiomqtt, agent.daemon, pathlib\n"
        "print([l for l in pathlib.Path('/proc/self/status').read_text().splitlines() "
        "if l.startswith('VmHWM')][0].split()[1])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return int(out.stdout.strip()) / 1024


def _measure(
    tmp: Path,
    files: list[Path],
    seconds: float,
    *,
    rdma: bool,
    gpu: bool,
    nccl: bool,
    mqtt: bool,
    mosquitto: str,
) -> tuple[float, float, str, int]:
    """(CPU %, peak RSS MB, last T line, scrapes) of one daemon run on the replayed load."""
    log, gpu_csv = tmp / "nccl" / "job.log", tmp / "gpu.csv"
    log.write_text("")
    gpu_csv.write_text("")
    mqtt_port, metrics_port = _free_port(), _free_port()
    (tmp / "m.conf").write_text(
        f"listener {mqtt_port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
    )
    config = tmp / "c.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp / "state"}"\n'
        f'[exporters.prometheus]\nlisten_address = "127.0.0.1"\nport = {metrics_port}\n'
        f"[exporters.mqtt]\nenabled = {str(mqtt).lower()}\nport = {mqtt_port}\n"
        "[sources.nic_counters]\nenabled = false\n"
        f'[sources.rdma_counters]\nenabled = {str(rdma).lower()}\nsysfs_root = "{tmp / "sys"}"\n'
        f'[sources.nccl_log]\nenabled = {str(nccl).lower()}\npaths = ["{tmp / "nccl"}/*.log"]\n'
        f'[sources.gpu_csv]\nenabled = {str(gpu).lower()}\npath = "{gpu_csv}"\n'
    )
    broker = subprocess.Popen([mosquitto, "-c", str(tmp / "m.conf")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    stop = mp.Event()
    writer = mp.Process(target=_writer, args=([str(f) for f in files], str(log), str(gpu_csv),
                                              stop))  # fmt: skip
    writer.start()
    time.sleep(0.5)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(config)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,  # `-m` puts the working directory first: another checkout's agent there won
    )
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    text = ""
    try:
        time.sleep(10)  # warm-up: windows fill, imports done
        cpu0, t0 = _cpu_seconds(daemon.pid), time.monotonic()
        scrapes = 0
        while time.monotonic() - t0 < seconds:
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
            scrapes += 1
            time.sleep(1.0)
        wall = time.monotonic() - t0
        cpu = 100.0 * (_cpu_seconds(daemon.pid) - cpu0) / wall
        rss = _hwm_mb(daemon.pid)
    finally:
        daemon.terminate()
        daemon.wait(timeout=15)
        stop.set()
        writer.join(timeout=5)
        broker.kill()
        broker.wait()
    period = next((ln for ln in text.splitlines() if ln.startswith("commpulse_sync_period")), "")
    return cpu, rss, period, scrapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--breakdown", action="store_true",
        help="also run with one source at a time (20 s each) to show where the CPU goes",
    )  # fmt: skip
    args = parser.parse_args()
    mosquitto = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin")
    if mosquitto is None:
        sys.exit("bench/overhead.py needs mosquitto (Debian package mosquitto)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        files = _make_tree(tmp / "sys", 8)
        (tmp / "nccl").mkdir()
        full = _measure(tmp, files, args.seconds, rdma=True, gpu=True, nccl=True, mqtt=True,
                        mosquitto=mosquitto)  # fmt: skip
        parts: list[tuple[str, float]] = []
        if args.breakdown:
            for label, kw in (
                ("8 RDMA ports at 100 Hz only", {"rdma": True, "gpu": False, "nccl": False}),
                ("8 GPUs at 10 Hz only", {"rdma": False, "gpu": True, "nccl": False}),
                ("5 k NCCL lines/s only", {"rdma": False, "gpu": False, "nccl": True}),
            ):
                cpu, _, _, _ = _measure(tmp, files, 20.0, mqtt=False, mosquitto=mosquitto, **kw)
                parts.append((label, cpu))
    cpu, rss, period, scrapes = full
    floor = _empty_loop_cpu(10.0)
    imports = _import_rss()
    print(f"| `commpulse run`, full load, {args.seconds:.0f} s after 10 s warm-up | value |")
    print("|---|---|")
    print(f"| CPU, % of one core (all threads) | {cpu:.1f} |")
    for label, part in parts:
        print(f"| ... {label} (no MQTT), % of one core | {part:.1f} |")
    print(f"| baseline: empty 100 Hz wake-up loop, % of one core | {floor:.2f} |")
    print(f"| peak RSS (VmHWM), MB | {rss:.0f} |")
    print(f"| baseline: RSS of a process that only imports the agent, MB | {imports:.0f} |")
    print(f"| scrapes | {scrapes} |")
    print(f"| last T on /metrics | `{period}` |")


if __name__ == "__main__":
    main()
