import sys

from numatopo_exporter.cli import main

sys.exit(main())
