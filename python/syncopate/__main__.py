"""``python -m syncopate``: the ``syncopate`` command line without the console script.

Lets a checkout run the CLI with the interpreter it imports from (``python -m syncopate demo``),
which is the one that matters when several environments are installed.
"""

import sys

from .cli import main

sys.exit(main())
