"""Input sources: one module per source, each a pure parser plus a thin reader.

* :mod:`collectors.counters_csv` — the counters CSV contract (cumulative byte counters);
* :mod:`collectors.gpu_csv` — nvidia-smi CSV and the named GPU-signal CSV;
* :mod:`collectors.nccl_log` — NCCL ``NCCL_DEBUG=INFO`` lines of every 2.x version;
* :mod:`collectors.pcap` — pcap / pcapng captures, RoCEv2-aware;
* :mod:`collectors._base` — the readings every live source emits and the ``Source`` protocol.
"""
