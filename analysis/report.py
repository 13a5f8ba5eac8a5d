"""Tables and figures from a run store: `python analysis/report.py runs/<study> --out DIR`.

The same as `lit-attention report`; see lit_attention/analysis/report.py for the options.
"""

import sys

from lit_attention.analysis.report import main

if __name__ == "__main__":
    sys.exit(main())
