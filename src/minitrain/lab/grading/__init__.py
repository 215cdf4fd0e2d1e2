"""Grading the learner's TODOs: `make grade` and a class (gradebook), the forkserver (a child per TODO), the
graders (graders: each TODO's `grade_<key>(repo, todo)`, which the registry in minitrain.lab.todos names, beside its
grader; notebook 15's in graders.from_scratch), DDP's arithmetic by hand (by_hand). The grader runs it (`make
grade`, a teacher's `--class`); the notebooks' grader cells call the graders."""
