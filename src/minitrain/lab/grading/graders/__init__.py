"""Graders for the lab's TODOs: each runs the learner's code for real, and teaches. A locked nbgrader
cell calls an exercise's grader; `python -m minitrain.lab.grade` calls them all:

    grade_shard_indices(shard_indices, corpus_dir)          02-sharding: the sheet's sharding rule
    grade_rank1_holds_rank0_init(fn, wrapdemo_folder)       03-wrapping: did DDP broadcast rank 0's weights?
    grade_timing_hook(my_timing_hook)                       04-launch-and-timing: a comm hook, at 3 and 2 processes
    grade_states_equivalent(states_equivalent, real=(a, b)) 05-verification and compare_states.py: Block E
    grade_make_shard(make_shard, corpus_dir)                data.py: Block B's split
    grade_check_shards(check_shards)                        data.py: Block B's checks, in 3 gloo processes
    grade_barrier_timer(BarrierTimer)                       timing.py: Block D variant A, in 2 gloo processes
    grade_block_a()                                         03-wrapping and ddp.py: Block A, alone and in 2 gloo processes
    grade_train_script(train_script, corpus_dir)            04-launch-and-timing and train.py: Block C, a real 2-process run
    from_scratch.grade_scratch_ddp(level)                   15-ddp-from-scratch and scratch_ddp.py: beside torch's DDP
"""

from minitrain.lab.grading.graders.running import ExerciseError, join_group
from minitrain.lab.grading.graders.sharding import grade_check_shards, grade_make_shard, grade_shard_indices
from minitrain.lab.grading.graders.states import grade_rank1_holds_rank0_init, grade_states_equivalent
from minitrain.lab.grading.graders.timers import grade_barrier_timer, grade_timing_hook, hook_module_source
from minitrain.lab.grading.graders.training import grade_train_script
from minitrain.lab.grading.graders.wrapper import grade_block_a

__all__ = ["ExerciseError", "grade_barrier_timer", "grade_block_a", "grade_check_shards", "grade_make_shard",
           "grade_rank1_holds_rank0_init", "grade_shard_indices", "grade_states_equivalent", "grade_timing_hook",
           "grade_train_script", "hook_module_source", "join_group"]
