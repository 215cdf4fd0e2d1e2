from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def student_tree(tmp_path_factory) -> Path:
    """`make student`'s tree, built once per session; tests copy it before they change it."""
    from minitrain.lab import student  # here, not at the top: its nbformat import is a second of CPU in every session

    out = tmp_path_factory.mktemp("edition") / "student"
    student.write_student_edition(out)
    return out
