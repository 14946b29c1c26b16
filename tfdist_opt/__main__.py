"""`python -m tfdist_opt ...` == `tfdist-opt ...`."""

import sys

from tfdist_opt.cli import main

sys.exit(main())
