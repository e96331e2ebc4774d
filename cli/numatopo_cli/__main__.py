import sys

from numatopo_cli.main import main

sys.exit(main())
