from rooflint.cli import script

script()
