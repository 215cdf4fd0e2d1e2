"""Where things live in the repository: computed once, here, from this file's place in it."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS_DIR = REPO / "data" / "corpus"  # generated on first use, git-ignored
NOTEBOOKS_DIR = REPO / "notebooks"
EXPERIMENT_DIR = REPO / "experiments" / "35-ddp-cpu"
TRAIN_SCRIPT = EXPERIMENT_DIR / "train.py"  # the sheet's Block C script
BEYOND_DIR = EXPERIMENT_DIR / "beyond"  # the deeper measurements' committed results
BUILD_DIR = REPO / "build"  # git-ignored: executed notebooks, scratch files, the student edition
EDITION_MARK = ".student-edition"  # in the student edition's root (`make student` writes it)
STUDENT_EDITION = (REPO / EDITION_MARK).is_file()


def relative(path: str | Path) -> str:
    """`path` relative to the repository when it lies inside it, for committed files; else as given."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)
