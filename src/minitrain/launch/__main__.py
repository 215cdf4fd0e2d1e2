"""`python -m minitrain.launch [torchrun options] SCRIPT ...`: the lab's loopback-only torchrun."""

from minitrain.launch.torchrun import main

if __name__ == "__main__":
    main()
