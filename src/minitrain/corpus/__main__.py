"""`python -m minitrain.corpus --out DIR`: generate the corpus (the command line is in command_line.py)."""

from minitrain.corpus.command_line import main

if __name__ == "__main__":
    main()
