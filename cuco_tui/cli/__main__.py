"""`python3 -m cuco_tui.cli ...`, as `cuco ...` (the GPU run scripts use this form)."""

import sys

from cuco_tui.cli.cuco import main

sys.exit(main())
