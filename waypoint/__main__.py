"""`python -m waypoint`: the `waypoint` command, for where its console script is not on PATH."""

from waypoint._cli import main

if __name__ == "__main__":
    main()
