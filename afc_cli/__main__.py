from afc_cli.cli import main

main()
