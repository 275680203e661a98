"""`raidlab report RESULTS...`: a results directory (or several of one scenario, combined)
-> report.md / report.html with figures.

results.py  load a results directory (refusing one from another scenario) or several, statistics
claims.py   verdicts holds / does not hold (above or below its band) / not judged (quick size) /
            not measured, with the measured ratio
control.py  the runner-fairness control ([control]): engine raid5 / md raid5, ok or runner-biased
figures.py  matplotlib figures drawn like the paper's (grouped bars, lines against clients), one
            panel per row, legend outside the data, log axes across more than 10x
labels.py   metric names as axis labels with units; architectures named as the figures show them
render.py   the document: the verdict banner and its caveats, claims, control, figures beside our
            numbers and the paper's, costs, provenance with links to every file read
"""

from raidlab.report.render import write_report

__all__ = ["write_report"]
