"""Start the fedala_lab lecture app: ``python app.py [--host 127.0.0.1] [--port 7860] [--share]``.

A thin launcher; the page and its handlers live in :mod:`fedala_lab.webapp` (also ``fedala-lab app``).
Listens on this machine only by default; ``--share`` (off by default) would create a public link.
"""

import sys

from fedala_lab.webapp import main

if __name__ == "__main__":
    sys.exit(main())
