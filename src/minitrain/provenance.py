"""Where a measurement came from: software versions, CPU, corpus checksum, date."""

import datetime
import hashlib
import os
import platform
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo on Linux, else what platform reports."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def rank_facts() -> dict:
    """What this process runs on, as the OS and torch see it: pid, CPU affinity, threads, and the seed torch's
    generator was last seeded with (torch.initial_seed(): the seed rule as the rank ran it)."""
    return {"pid": os.getpid(), "seed": torch.initial_seed(),
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def boot_id() -> str:
    """This boot of the machine: the first 8 characters of Linux's random boot id, "" elsewhere."""
    path = Path("/proc/sys/kernel/random/boot_id")
    return path.read_text().strip()[:8] if path.exists() else ""


def sitting() -> str:
    """The sitting a measurement belongs to: this boot of this CPU and kernel (elsewhere: today's date).
    Numbers compare within one sitting; across two they may differ by more than any effect they show."""
    boot = f"boot {boot_id()}" if boot_id() else f"date {datetime.datetime.now(datetime.timezone.utc).date().isoformat()}"
    return f"{boot} of {cpu_model()} ({platform.system()} {platform.release()})"


def machine_provenance() -> dict:
    """The facts a reader needs to repeat or judge a measurement made on this machine now."""
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cores": usable_cores(),
        "sitting": sitting(),
        # other programs (tests, builds) running meanwhile slow a 2-core machine: say how busy it was
        "load_average_1min": os.getloadavg()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def provenance(corpus_dir: Path) -> dict:
    """machine_provenance() and the checksum of the corpus a run trained on."""
    return machine_provenance() | {"corpus_sha256": file_sha256(Path(corpus_dir) / "train.jsonl")}
