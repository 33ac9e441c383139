from rooflint.cli import main

main()
