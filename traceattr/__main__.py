"""`python -m traceattr`: the `traceattr` console script's entry point ([project.scripts] in pyproject.toml)."""
from traceattr.entry import main

if __name__ == "__main__":
    main()
