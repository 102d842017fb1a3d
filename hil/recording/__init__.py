"""Run recordings (.hilrec): the format, its reader and recorder, replay, and the CLI's state and CSV files."""
