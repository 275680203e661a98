"""`raidlab report RESULTS...`: a results directory (or several of one scenario, combined)
-> report.md / report.html with figures.

results.py  load a results directory (refusing one from another scenario) or several, statistics
claims.py   verdicts holds / does not hold / not measured with the measured ratio
control.py  the runner-fairness control ([control]): engine raid5 / md raid5, ok or runner-biased
figures.py  matplotlib figures drawn like the paper's (grouped bars, lines against clients)
render.py   the document: environment, figures, our numbers beside the paper's, claims, control, failures
"""

from raidlab.report.render import write_report

__all__ = ["write_report"]
