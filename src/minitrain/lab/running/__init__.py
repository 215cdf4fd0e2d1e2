"""Running the lab: `make lab` (make_lab) and its notebook executor (execute_notebook), the one-command
experiment (whole_experiment), the repeats taking turns (alternating_repeats), which runs are reused (reuse), whether
the machine is quiet (load), and the seconds each notebook took (notebook_times). The learner's run uses
it (`make lab`, notebooks 05, 06 and run.ipynb); the teacher's `make measurements` runs it again."""
