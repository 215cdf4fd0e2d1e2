from pathlib import Path

import pytest

from minitrain.corpus import generate_corpus


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    """The lab's corpus, generated once per test session into a temporary folder."""
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(out)
    return out
