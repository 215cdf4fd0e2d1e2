"""Notebook 16's answer key (ex16a-c): the fault in each exercise script, and the tool whose answer a real run must
give first. The teacher's: the student edition leaves it out, and class grading checks the learners' answers with it
in its own process (minitrain.lab.grading.graders.diagnosis)."""

from dataclasses import dataclass

from minitrain.diagnose.exercise import FOLDER as EXERCISE


@dataclass(frozen=True)
class Planted:
    rank: int | None  # the culprit, as exercise.CAUSES defines it for `cause`
    step: int  # the script's `step` at which the culprit's path parts from the others'
    calls: tuple[str, ...]  # texts of the lines where it parts, or that make the ranks' counts or decisions differ
    collective: str  # the first collective the culprit skips (the others call it) or adds (they do not)
    cause: str  # one of exercise.CAUSES
    tool: str  # the tool whose answer the real run must give
    shows: str  # a pattern the tool's answer matches when the fault shows

    def lines(self, script: str) -> set[int]:
        """The numbers of the lines of `script` where the culprit's path parts from the others'."""
        text = (EXERCISE / script).read_text().splitlines()
        return {n for n, line in enumerate(text, 1) if any(call in line for call in self.calls)}


# run_a: rank 1's batch at step 8 holds an example whose prompt fills the block, so its answer mask is empty and its
# loss NaN: rank 1 alone skips the step; its all-reduces then pair with rank 0's of the step before, until the log's
# all-reduce meets DDP's bucket at step 11 (rank 1 aborts there).
# run_b: packing after sharding gives rank 0 fifteen batches an epoch and rank 1 fourteen: rank 0 runs step 14 alone
# while rank 1 evaluates; rank 1 (not the culprit) aborts in evaluate's all-reduce.
# run_c: rank 1's half of the validation set crosses TARGET at step 23, rank 0's not: rank 1 breaks out and waits in
# the final barrier, rank 0 waits in step 24's backward.
PLANTED = {
    "run_a.py": Planted(1, 8, ("if not torch.isfinite(loss):", "skipped += 1", "continue"), "all_reduce",
                        "skipped-backward", "hang_report", r"^all_reduce received a message of another size .* on rank"),
    "run_b.py": Planted(0, 14, ("blocks = pack(docs[rank::world]", "steps_per_epoch = len(blocks)",
                                 "for i in range(steps_per_epoch):"), "all_reduce",
                        "uneven-shard", "hang_report", r"^all_reduce received a message of another size .* on rank 1"),
    "run_c.py": Planted(1, 23, ("my_train, my_val = train[rank::world], val[rank::world]",
                                 "val_loss = validation_loss(model, my_val)", "if val_loss < TARGET:", "break"),
                        "all_reduce", "early-exit", "hang_report", r"^hangs at run_c\.py:\d+ on rank \d \(waits in "),
}
