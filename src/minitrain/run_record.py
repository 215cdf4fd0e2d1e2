"""run.json: one training run's configuration, timing summary and provenance, as one typed record."""

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path


class RunRecordError(ValueError):
    """run.json cannot be read as a RunRecord; the message names the file, the problem and the fix."""


@dataclass
class RunRecord:
    """What train.py's rank 0 writes to run.json after a run, field for field."""

    run_id: str  # names this run wherever its numbers are shown
    world_size: int
    launcher: str  # "torchrun" or "spawn"
    timing: list[str]  # the timing variants on in this run ("barrier", "hook")
    steps: int
    warmup_steps: int
    batch_size_per_rank: int
    block_size: int
    lr: float
    model_config: dict[str, int]  # n_layer, n_head, n_embd
    comm: str  # the comm hook: "allreduce", or "noop" as a control
    no_sync: bool
    seed_base: int
    threads_per_rank: int
    model_params: int
    buckets: list[dict[str, int]] | None  # {"index", "bytes"} per DDP gradient bucket; None if the hook never ran
    summary: dict[str, dict[str, float]]  # step_ms, forward_ms, ... -> mean, median, p95 over the measured steps
    tokens_per_sec: dict[str, float]  # mean, median, p95, min, max over the measured steps
    shard_sentences: list[int]  # per rank
    first_sentences: list[str]  # per rank
    ranks: list[dict]  # per rank: rank, pid, affinity, threads, omp_num_threads
    torch: str
    python: str
    platform: str
    cpu_model: str
    cores: int
    load_average_1min: float
    date: str
    corpus_sha256: str
    command: str  # the command line that started the run, paths relative to the repository
    restart: dict | None = None  # attempt, max_restarts, snapshot_every, faults, ...: only with snapshots or faults

    def __getitem__(self, key: str) -> object:
        """run["key"]: only for minitrain.measure, until it reads attributes (then this goes)."""
        return getattr(self, key)

    def write(self, path: Path) -> None:
        """Write run.json (no "restart" key when there is no restart record, as before)."""
        record = {k: v for k, v in asdict(self).items() if k != "restart" or v is not None}
        Path(path).write_text(json.dumps(record, indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> "RunRecord":
        """Read run.json, or RunRecordError naming the file, what is wrong and the fix."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise RunRecordError(f"{path} is missing; run train.py into {path.parent}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RunRecordError(f"{path} is not valid JSON ({e}); re-run train.py into {path.parent}") from e
        if not isinstance(data, dict):
            raise RunRecordError(f"{path} does not hold a JSON object; re-run train.py into {path.parent}")
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.name != "restart"}
        missing, unknown = sorted(required - data.keys()), sorted(data.keys() - known)
        if missing or unknown:
            found = "; ".join(f"{label} {', '.join(names)}" for label, names in
                              (("lacks", missing), ("has unknown fields", unknown)) if names)
            raise RunRecordError(f"{path} {found}: not written by this train.py; re-run it into {path.parent}")
        return cls(**data)
