"""`python -m quantserve ...` runs the CLI, as the `quantserve` command does."""

from ._cli import main

main()
