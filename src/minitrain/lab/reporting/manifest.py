"""manifest.json: the lab's figures from the sheet's runs and the repeats, as one typed record.

minitrain.lab.reporting.report builds and writes it; the checker and the notebooks read it with Manifest.read.
"""

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from minitrain.artifacts import field_problems, read_json_object, write_json


class ManifestError(ValueError):
    """manifest.json cannot be read as a Manifest; the message names the problem and the fix."""


@dataclass
class Manifest:
    """The sheet's manifest fields, then the repeats, the machine and the lesson paragraph."""

    lab: str
    seed: int
    backend: str
    world_size: int
    launcher: str
    model_params: int
    steps: int
    warmup_steps: int
    run_ids: dict[str, str]  # "1proc", "2proc" -> the sheet's runs
    # timings.jsonl of the sheet's 2-process run over the steps after the warm-up (minitrain.timing.manifest_fields)
    backward_allreduce_p50_ms: float
    backward_allreduce_p95_ms: float
    backward_allreduce_mean_ms: float
    allreduce_p50_ms: float
    allreduce_p95_ms: float
    allreduce_mean_ms: float
    tokens_per_sec_1proc: float  # of the median repeats
    tokens_per_sec_2proc: float
    speedup_2proc: float  # the median repeats' tokens/s ratio; the median of repeats.speedups is paired_speedup()
    speedup_2proc_range: list[float]  # min, max of the repeats' 2-vs-1 ratios
    verdict: str  # minitrain.lab.reporting.verdict over the repeats' tokens/s
    repeats: dict  # count, timing, order, speedups, "1proc" and "2proc" runs (2proc: with allreduce_share_of_step), median_run_ids
    step_p50_ms_1proc: float
    step_p50_ms_2proc: float
    allreduce_share_of_step: float  # of the median 2-process repeat's median step
    step_breakdown_ms: dict[str, dict[str, float]]  # "1proc", "2proc" -> phase -> median ms
    buckets: list[dict[str, int]]
    gradient_bytes: int
    byte_equivalent: bool  # the sheet's field name; it holds the allclose verdict (minitrain.verify.CLOSE), not bytes
    max_abs_diff: float
    bitwise_equal: bool  # the state files' tensors compared byte for byte (minitrain.verify.state_bytes)
    threads_per_rank: dict[str, int]
    cores: int
    cpu_model: str
    sitting: str  # of the runs it summarizes (minitrain.provenance.sitting)
    torch: str
    python: str
    platform: str
    batch_size_per_rank: int
    block_size: int
    lr: float
    corpus_sha256: str
    date: str
    command: str
    run_commands: dict[str, str]
    beyond_findings: dict[str, dict]  # the deeper measurements' findings, by name (minitrain.lab.reporting.report)
    lesson_notes: str  # the learner's paragraph, Block G (stop condition 4); empty until they write it in notebook 06
    # why the repeats look disturbed by other programs (minitrain.lab.reporting.disturbance), [] when quiet;
    # manifests written before the field lack it and read as []: the checker recomputes it from the repeats
    disturbed: list[str] = field(default_factory=list)

    def paired_speedup(self) -> float:
        """The median of the repeats' paired 2-vs-1 ratios: the statistic speedup_2proc_range is the range of
        (speedup_2proc is the median repeats' tokens/s ratio, another statistic)."""
        return statistics.median(self.repeats["speedups"])

    def allreduce_shares(self) -> list[float]:
        """The all-reduce's share of a 2-process step in each 2-process repeat, in run order; [] for a manifest
        written before the repeats held it."""
        shares = [r.get("allreduce_share_of_step") for r in self.repeats["2proc"]]
        return shares if shares and all(isinstance(s, (int, float)) for s in shares) else []

    def write(self, path: Path) -> None:
        """Write manifest.json atomically: a reader never sees a half-written one."""
        write_json(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> "Manifest":
        """Read manifest.json, or ManifestError naming what is wrong. Values are not checked here:
        the checker names a null, a placeholder or a wrong figure field by field."""
        path = Path(path)
        fix = f"re-make it with python -m minitrain.lab.experiment --out {path.parent}"
        data = read_json_object(path, ManifestError, path.name, fix, fix)
        if found := field_problems(cls, data, optional=("disturbed",)):
            raise ManifestError(f"{path.name} {found}; {fix}")
        return cls(**data)
