"""Running the lab: `make lab`'s batch runner (runner) and its notebook executor (execute), the one-command
experiment and the alternating repeats, and the seconds each notebook took (notebook_times). The learner's run uses
it (`make lab`, notebooks 05, 06 and run.ipynb); the teacher's `make measurements` runs it again."""
