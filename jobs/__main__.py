import sys

from jobs.cli import main

sys.exit(main())
