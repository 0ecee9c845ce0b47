"""Every subcommand, ``train`` included, one module each. A module here (or anywhere, named in ``cli.COMMANDS``) has
``add_parser(subparsers)``, which adds its parser and sets ``func`` to the function that runs it; the function
returns the exit code and raises ``UserError`` for bad input (the CLI prints it in one line, exit 2)."""
