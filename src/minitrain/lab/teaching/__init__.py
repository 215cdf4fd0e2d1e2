"""The teacher's modules: the key's quotes and TEACHER.md's times (refresh), the Block G paragraph's rubric (rubric),
Block G's reference paragraph (reference), notebook 16's answer key (diagnosis_key, which class grading grades ex16a-c
with). Only the teacher uses them (`python -m minitrain.lab.teacher`, `make measurements`, `python -m
minitrain.lab.grade --class`): the student edition keeps this package's __init__ alone."""
