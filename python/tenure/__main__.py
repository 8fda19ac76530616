import sys

from tenure.cli import main

sys.exit(main())
