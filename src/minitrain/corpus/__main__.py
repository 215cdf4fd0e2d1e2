"""`python -m minitrain.corpus --out DIR`: generate the corpus (the command line is in cli.py)."""

from minitrain.corpus.cli import main

if __name__ == "__main__":
    main()
