"""The command line: one thin module per command (argparse -> options -> the engine)."""
