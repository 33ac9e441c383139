"""The command line: thin Typer commands that parse, call one engine function and render."""


def main() -> None:
    """Console entry point (imports the app lazily so `rooflint --version` stays fast)."""
    from rooflint.cli.app import main as run

    run()
