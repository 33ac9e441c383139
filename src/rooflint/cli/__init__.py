"""The command line: thin Typer commands that parse, call one engine function and render."""


def main() -> None:
    """The command line's entry point (imports the app lazily so `rooflint --version` stays fast):
    its one-line errors and exit codes, raised as SystemExit, so it can also run inside a Python."""
    from rooflint.cli.app import main as run

    run()


def script() -> None:
    """The `rooflint` console script and `python -m rooflint`: main, then the process ends without
    tearing down the modules torch and the rest imported (rooflint.core.fast_exit)."""
    try:
        main()
    except SystemExit as done:
        from rooflint.core.fast_exit import exit_now

        exit_now(done.code)
