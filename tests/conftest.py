from pathlib import Path

import pytest
import torch

from minitrain.corpus import generate_corpus

# `make test` runs two pytest workers on a two-core machine, beside the runs they start: torch's
# computations in this process take one thread each, as torchrun gives each of two workers. Child
# processes (runs, kernels) are not affected: they read OMP_NUM_THREADS, which stays as it was.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    """The lab's corpus, generated once per test session into a temporary folder."""
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(out)
    return out
