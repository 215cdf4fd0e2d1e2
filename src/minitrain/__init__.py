"""minitrain: a tiny GPT, its verb-grammar corpus, and the pieces to train it with DDP on CPUs."""
