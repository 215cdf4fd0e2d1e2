"""The teacher's modules: the key's quotes and TEACHER.md's times (teacher), the Block G paragraph's rubric (rubric),
Block G's reference paragraph (reference). Only the teacher uses them (`python -m minitrain.lab.teacher`,
`make measurements`): the student edition keeps this package's __init__ alone."""
