"""The student edition: its writer (student_edition: the teacher's `make student`, and the grader's tree for each
submission) and its pytest hooks (blank_todos: the learner's `make test` in a student tree skips a blank TODO)."""
