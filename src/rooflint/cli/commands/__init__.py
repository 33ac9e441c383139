"""The CLI commands, one module each (list is listing.py), registered by rooflint.cli.app's COMMANDS."""
