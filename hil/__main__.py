"""Allow ``python3 -m hil`` as an alias of the ``hil`` console script."""

from hil.cli import app

app(prog_name="hil")
