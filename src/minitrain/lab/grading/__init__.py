"""Grading the learner's TODOs: `make grade` and a class (grade), the TODOs' table (todos), the forkserver, the
exercises' graders (graders, notebook 15's among them), DDP's arithmetic by hand (by_hand). The grader runs
it (`make grade`, a teacher's `--class`); the notebooks' grader cells call the graders."""
