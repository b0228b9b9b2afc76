"""``python -m kiwifs``: the same command as the installed ``kiwifs`` script."""

from kiwifs.cli import main

if __name__ == "__main__":
    main()
