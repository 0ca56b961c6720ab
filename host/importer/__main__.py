import sys

from host.importer.cli import main

sys.exit(main())
