"""fca: the Python client of fca-server (docs/python.md).

    import fca
    client = fca.Client()                      # $FCA_SERVER, $FCA_TOKEN
    client.upload("eval.txt"); client.upload("calib.txt")
    job = client.submit(["featuregate-small"], eval="eval.txt", calib="calib.txt")
    job.wait()                                 # a progress bar
    df = job.results()                         # a pandas DataFrame

pandas (DataFrames) and tqdm (progress bars) are optional; numpy is needed
by export() only.
"""

from fca.client import Client, Job, Report
from fca.comparison import Comparison, PooledReport
from fca.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                        FailedPrecondition, FcaError, Internal, InvalidArgument, JobFailed,
                        NotFound, OutOfRange, PermissionDenied, ResourceExhausted, Unauthenticated,
                        Unavailable, Unimplemented)
from fca.version import __version__

__all__ = [
    "Client", "Job", "Report", "PooledReport", "Comparison", "FcaError", "InvalidArgument", "NotFound",
    "AlreadyExists", "PermissionDenied", "Unauthenticated", "ResourceExhausted",
    "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable",
    "DeadlineExceeded", "Cancelled", "DataLoss", "JobFailed", "__version__"
]
