"""CompareJobs and PoolJobs as reports (client.compare(), client.pool())."""

from fca import frames
from fca.client import Report
from fca.v1 import audit_service_pb2 as pb


class PooledReport(Report):
    """PoolJobs: a Report over several jobs (its job is their merge, id 0),
    and `sources`: one row per model with the job it came from (model,
    job_id, weights_sha256)."""

    def __init__(self, message, info=None):
        super().__init__(message.report, info)
        self.pooled = message
        self.job_ids = list(dict.fromkeys(m.job_id for m in message.models))

    @property
    def sources(self):
        return frames.messages_frame(self.pooled.models, pb.PooledModel.DESCRIPTOR)

    def __repr__(self):
        return f"<fca.PooledReport of jobs {self.job_ids}: {len(self.models)} model(s), " \
               f"{len(self.message.metrics)} metrics>"


class Comparison:
    """CompareJobs: `reports` (fca.Report each, request order) and `metrics`,
    every report's metrics with a job_id column first."""

    def __init__(self, reports):
        self.reports = reports

    @property
    def metrics(self):
        pd = frames._pandas()
        parts = []
        for r in self.reports:
            df = r.metrics
            df.insert(0, "job", r.job.id)
            parts.append(df)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def __repr__(self):
        return f"<fca.Comparison of jobs {[r.job.id for r in self.reports]}>"

    def _repr_html_(self):
        if not frames.have_pandas():
            return frames.html_table([("jobs", [r.job.id for r in self.reports])])
        df = self.metrics
        df = df[df.metric == "penalty"]
        return df.pivot_table(index=["job", "model"], columns="intervention", values="value",
                              sort=False).to_html(na_rep="")
