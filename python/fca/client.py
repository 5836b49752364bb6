"""fca.Client: the fca.v1.AuditService from Python (docs/python.md).

The stubs in fca.v1 are generated from proto/fca/v1/audit_service.proto when
the package is built (python/CMakeLists.txt), never committed.
"""

import hashlib
import os
import pathlib
import warnings

import grpc

from fca import errors, frames
from fca.enums import job_state as _job_state
from fca.enums import job_state_name as _state_name
from fca.enums import project_role as _project_role
from fca.progress import progress_bar, show_progress
from fca.v1 import audit_service_pb2 as pb
from fca.v1 import audit_service_pb2_grpc as pb_grpc

DEFAULT_SERVER = "127.0.0.1:7400"  # as the fca CLI's --server default
CHUNK_BYTES = 1 << 20  # the API's chunk limit (audit_service.proto, header)
_TERMINAL = {pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED}
_KINDS = {"text": pb.DATASET_KIND_TEXT, "tokens": pb.DATASET_KIND_TOKENS_INT32}


def _call(method, request, **kwargs):
    try:
        return method(request, **kwargs)
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e) from None


def _stream(method, request, **kwargs):
    try:
        yield from method(request, **kwargs)
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e) from None


def _maybe_frame(messages, descriptor, as_frame, skip=()):
    if as_frame and frames.have_pandas():
        return frames.messages_frame(messages, descriptor, skip)
    return [frames.row(m, skip) for m in messages]


class Client:
    """A connection to fca-server.

    server: "host:port" [$FCA_SERVER, else 127.0.0.1:7400]
    token:  API key, sent as `authorization: Bearer <token>` [$FCA_TOKEN]
    tls:    connect with TLS (system roots); ca_cert (a PEM file's path or its
            bytes) gives the roots and implies TLS.
    timeout: seconds per unary call [None: no deadline]
    """

    def __init__(self, server=None, token=None, tls=False, ca_cert=None, timeout=None):
        self.server = server or os.environ.get("FCA_SERVER") or DEFAULT_SERVER
        token = token if token is not None else os.environ.get("FCA_TOKEN", "")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        # Replies (a comparison with per-layer rows) may exceed gRPC's 4 MiB.
        options = [("grpc.max_receive_message_length", 256 << 20)]
        if ca_cert is not None or tls:
            roots = None
            if ca_cert is not None:
                roots = ca_cert if isinstance(ca_cert, bytes) else pathlib.Path(ca_cert).read_bytes()
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channel = grpc.secure_channel(self.server, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(self.server, options=options)
        self._stub = pb_grpc.AuditServiceStub(self._channel)

    def __repr__(self):
        return f"fca.Client({self.server!r})"

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- plumbing
    def _unary(self, name, request, timeout=None):
        return _call(getattr(self._stub, name), request, metadata=self._metadata,
                     timeout=timeout if timeout is not None else self.timeout)

    def _all_pages(self, name, request, field):
        """Every `field` item of a paged call, following next_page_token."""
        items = []
        while True:
            reply = self._unary(name, request)
            items.extend(getattr(reply, field))
            if not reply.next_page_token:
                return items
            request.page_token = reply.next_page_token

    def _server_stream(self, name, request):
        return _stream(getattr(self._stub, name), request, metadata=self._metadata)

    # --- the server and its models
    def info(self):
        """GetServerInfo: versions, limits, interventions and metrics (the message)."""
        return self._unary("GetServerInfo", pb.GetServerInfoRequest())

    def _info(self):
        """info(), fetched once: what a Report reads its group scopes from."""
        if getattr(self, "_info_cache", None) is None:
            self._info_cache = self.info()
        return self._info_cache

    def models(self, as_frame=True):
        """The models of the server's repository, one row each (`sites`: a
        list), then the folders it cannot serve: `state` is "READY" or
        "UNAVAILABLE" (as Triton's repository index), `reason` says why a
        folder is unavailable (its config.json refused) and is "" otherwise."""
        reply = self._unary("ListModels", pb.ListModelsRequest())
        cols = frames.columns(pb.Model.DESCRIPTOR) + ["state", "reason"]
        rows = [{**frames.row(m), "state": "READY", "reason": ""} for m in reply.models]
        rows += [{**{c: None for c in cols}, "name": u.name, "state": "UNAVAILABLE",
                  "reason": u.reason} for u in reply.unavailable]
        if as_frame and frames.have_pandas():
            return frames.frame(rows, cols)
        return rows

    # --- datasets
    def datasets(self, as_frame=True, project=""):
        """The datasets of a project [the caller's personal one], newest first, every page."""
        request = pb.ListDatasetsRequest(project=project, page_size=1000)
        datasets = self._all_pages("ListDatasets", request, "datasets")
        return _maybe_frame(datasets, pb.Dataset.DESCRIPTOR, as_frame)

    def upload(self, data, name=None, kind="text", project=""):
        """Uploads a dataset: `data` is a path or bytes; `name` defaults to the
        file's name; kind "text" or "tokens" (little-endian int32 ids);
        project: where it goes (writers) [the caller's personal project].
        Returns the stored dataset as a dict (with `deduplicated`)."""
        if isinstance(data, (str, os.PathLike)):
            path = pathlib.Path(data)
            name = name or path.name
            data = path.read_bytes()
        if not name:
            raise ValueError("upload: name= is needed for bytes")
        if kind not in _KINDS:
            raise ValueError(f"upload: kind must be one of {sorted(_KINDS)}, not {kind!r}")
        header = pb.UploadDatasetHeader(name=name, kind=_KINDS[kind], size_bytes=len(data),
                                        sha256=hashlib.sha256(data).hexdigest(), project=project)

        def parts():
            yield pb.UploadDatasetRequest(header=header)
            for off in range(0, len(data), CHUNK_BYTES):
                yield pb.UploadDatasetRequest(chunk=data[off:off + CHUNK_BYTES])

        reply = _call(self._stub.UploadDataset, parts(), metadata=self._metadata)
        out = frames.row(reply.dataset)
        out["deduplicated"] = reply.deduplicated
        return out

    def delete_dataset(self, name, project=""):
        request = pb.DeleteDatasetRequest(name=name, project=project)
        return self._unary("DeleteDataset", request).bytes_freed

    # --- jobs
    def submit(self, models, eval, calib, dense_twin="", project="", **spec):
        """Submits an audit; returns its fca.Job (state QUEUED).

        models: a name or a list; eval, calib: dataset names (or
        "sha256:<hex>") of the job's project; project: where the job goes
        (writers) [the caller's personal project]; every other AuditSpec
        field by its proto name (window_length=32, interventions=[...],
        timing_repeats=0, ...).
        """
        if isinstance(models, str):
            models = [models]
        known = set(frames.columns(pb.AuditSpec.DESCRIPTOR))
        unknown = sorted(set(spec) - known)
        if unknown:
            raise TypeError(f"submit: unknown AuditSpec field(s) {unknown}; known: {sorted(known)}")
        request = pb.SubmitAuditRequest(project=project, spec=pb.AuditSpec(
            models=list(models), eval_dataset=eval, calib_dataset=calib, dense_twin=dense_twin,
            **spec))
        return Job(self, self._unary("SubmitAudit", request).job)

    def job(self, job_id):
        """Re-attaches to a job by id (NotFound when the caller cannot see it)."""
        return Job(self, self._get_job(int(job_id)))

    def _get_job(self, job_id):
        return self._unary("GetJob", pb.GetJobRequest(job_id=job_id)).job

    def jobs(self, state=None, as_frame=True, project="", **filters):
        """Jobs visible to the caller, newest first, every page; filters as
        ListJobsRequest's (model=, dataset=, label=, owner=); state a name
        ("RUNNING") or None for any; project: that project's jobs ["": the
        caller's personal project; an admin's: every project]."""
        request = pb.ListJobsRequest(page_size=500, project=project, **filters)
        if state is not None:
            request.state = _job_state(state)
        jobs = self._all_pages("ListJobs", request, "jobs")
        rows = [frames.row(j, skip=("tasks",)) for j in jobs]
        if not (as_frame and frames.have_pandas()):
            return rows
        # A frame's cells are values: the spec and provenance in columns.
        rows, cols = frames.flattened(pb.Job.DESCRIPTOR, rows, nested=("spec", "provenance"),
                                      skip=("tasks",))
        return frames.frame(rows, cols)

    # --- results
    def query(self, job=None, model=None, intervention=None, metric=None, dataset_sha256="",
              as_frame=True):
        """Stored result rows matching a filter, every page, oldest first.
        job, model, intervention, metric: one value or a list (a row matches
        any); a job may be an fca.Job or its id."""
        f = pb.ResultFilter(dataset_sha256=dataset_sha256)
        for value, field in ((job, f.job_ids), (model, f.models), (intervention, f.interventions),
                             (metric, f.metrics)):
            if value is None:
                continue
            values = value if isinstance(value, (list, tuple, set)) else [value]
            field.extend(v.id if isinstance(v, Job) else v for v in values)
        rows = self._all_pages("QueryResults", pb.QueryResultsRequest(filter=f, page_size=1000),
                               "results")
        if as_frame and frames.have_pandas():
            return frames.results_frame(rows, pb.Result.DESCRIPTOR)
        return [frames.result_row(r) for r in rows]

    def report(self, job):
        """The report of a job (fca.Report: tables as DataFrames)."""
        job_id = job.id if isinstance(job, Job) else int(job)
        return Report(self._unary("GetReport", pb.GetReportRequest(job_id=job_id)), self._info)

    def compare(self, jobs, include_sites=False):
        """Several jobs side by side (fca.Comparison); 1 to 16 jobs or ids."""
        ids = [j.id if isinstance(j, Job) else int(j) for j in jobs]
        reply = self._unary("CompareJobs",
                            pb.CompareJobsRequest(job_ids=ids, include_sites=include_sites))
        from fca.comparison import Comparison
        return Comparison([Report(r, self._info) for r in reply.reports])

    def pool(self, jobs):
        """Several finished jobs as one report (fca.PooledReport: a Report
        whose across_models are over every job's models, with `sources`,
        the job each model came from); 2 to 64 jobs or ids whose specs agree
        on the data, the windows and the settings (docs/python.md)."""
        ids = [j.id if isinstance(j, Job) else int(j) for j in jobs]
        from fca.comparison import PooledReport
        return PooledReport(self._unary("PoolJobs", pb.PoolJobsRequest(job_ids=ids)), self._info)

    def windows(self, job, model="", as_frame=True):
        """A job's evaluation and calibration windows with the hashes
        export() takes."""
        job_id = job.id if isinstance(job, Job) else int(job)
        reply = self._unary("ListJobWindows", pb.ListJobWindowsRequest(job_id=job_id, model=model))
        return _maybe_frame(reply.windows, pb.Window.DESCRIPTOR, as_frame)

    def export(self, model, window_hash, dtype="float32"):
        """The cached coefficients of `model` on one window (fca.Coefficients:
        one numpy array [T, channels] per site)."""
        from fca.coefficients import Coefficients
        request = pb.ExportCoefficientsRequest(model=model, window_hash=window_hash, dtype=dtype)
        header, chunks = None, []
        for part in self._server_stream("ExportCoefficients", request):
            if part.HasField("header"):
                header = part.header
            else:
                chunks.append(part.chunk)
        if header is None:
            raise errors.DataLoss("ExportCoefficients sent no header", grpc.StatusCode.DATA_LOSS)
        return Coefficients(header, b"".join(chunks))

    # --- the queue (docs/user-guide.md "The queue")
    def queue(self, as_frame=True):
        """GetQueue, what `fca queue` shows: a dict with the totals over the
        whole server (`queued_jobs`, `running_jobs`, `queued_tasks`,
        `running_tasks`) and three tables: `models` (per model its queued and
        running tasks; `loaded_on`, `running_on`: lists of workers),
        `projects` (per project its queued and running jobs and tasks; the
        row with project "" sums the projects the caller is no member of) and
        `jobs` (the caller's queued and running jobs, an admin's every one,
        oldest first; `position` 1 = next, 0 when none of its tasks waits;
        `tasks_ahead`: waiting tasks of older jobs, of any project)."""
        reply = self._unary("GetQueue", pb.GetQueueRequest())
        tables = {"models": pb.ModelQueue, "projects": pb.ProjectQueue, "jobs": pb.QueuedJob}
        queue = frames.row(reply, skip=tuple(tables))
        for field, message in tables.items():
            queue[field] = _maybe_frame(getattr(reply, field), message.DESCRIPTOR, as_frame)
        return queue

    # --- projects (docs/user-guide.md "Projects")
    def create_project(self, name, owner=""):
        """Creates a shared project; `owner` its first owner [the caller].
        Returns the project as a dict."""
        request = pb.CreateProjectRequest(name=name, owner=owner)
        return frames.row(self._unary("CreateProject", request).project)

    def projects(self, as_frame=True):
        """The projects the caller is a member of, with the caller's role."""
        projects = self._unary("ListProjects", pb.ListProjectsRequest()).projects
        return _maybe_frame(projects, pb.Project.DESCRIPTOR, as_frame, skip=("members",))

    def project(self, name):
        """One project with its members (a dict; `members`: a list)."""
        return frames.row(self._unary("GetProject", pb.GetProjectRequest(name=name)).project)

    def add_member(self, project, user, role):
        """Adds `user` to `project` as "reader", "writer" or "owner" (or
        changes their role); returns the project with its members. Warns
        (UserWarning) when the server says the user has no API key yet."""
        request = pb.AddProjectMemberRequest(project=project, user=user, role=_project_role(role))
        reply = self._unary("AddProjectMember", request)
        if reply.HasField("user_has_key") and not reply.user_has_key:
            warnings.warn(f"{user} has no API key yet, so cannot call the server as a member",
                          stacklevel=2)
        return frames.row(reply.project)

    def remove_member(self, project, user):
        """Removes `user` from `project`; returns the project with its members."""
        request = pb.RemoveProjectMemberRequest(project=project, user=user)
        return frames.row(self._unary("RemoveProjectMember", request).project)

    def delete_project(self, name):
        """Deletes a shared project with its jobs, datasets and webhooks;
        returns {"jobs_deleted": n, "datasets_deleted": n, "webhooks_deleted": n}."""
        return frames.row(self._unary("DeleteProject", pb.DeleteProjectRequest(name=name)))

    # --- API keys (docs/operator-guide.md "The key lifecycle")
    def keys(self, user="", as_frame=True):
        """API keys: the caller's own (admins: every key, or `user`'s)."""
        keys = self._unary("ListApiKeys", pb.ListApiKeysRequest(user=user)).keys
        return _maybe_frame(keys, pb.ApiKey.DESCRIPTOR, as_frame)

    def create_key(self, user="", role="", expires_in_seconds=0):
        """Creates an API key [for the caller, role "user", never expiring];
        returns the key as a dict with `secret`, the key itself, shown this
        once."""
        request = pb.CreateApiKeyRequest(user=user, role=role,
                                         expires_in_seconds=expires_in_seconds)
        reply = self._unary("CreateApiKey", request)
        return {**frames.row(reply.key), "secret": reply.secret}

    def revoke_key(self, key_id):
        """Revokes a key by id; returns it as a dict (state "revoked")."""
        return frames.row(self._unary("RevokeApiKey", pb.RevokeApiKeyRequest(id=key_id)).key)

    def rotate_key(self, key_id, grace_seconds=0):
        """Replaces a key by a new one; the old one stays valid for
        `grace_seconds`. Returns the new key as a dict with `secret` and
        `replaced`, the old key with its new expiry."""
        request = pb.RotateApiKeyRequest(id=key_id, grace_seconds=grace_seconds)
        reply = self._unary("RotateApiKey", request)
        return {**frames.row(reply.key), "secret": reply.secret,
                "replaced": frames.row(reply.replaced)}

    # --- webhooks (docs/operator-guide.md "Webhooks")
    def add_webhook(self, url, project=""):
        """Registers `url` for the job ends of `project` [the caller's
        personal one]; returns the webhook as a dict with `secret`, the key
        of its signatures, shown this once."""
        reply = self._unary("AddWebhook", pb.AddWebhookRequest(project=project, url=url))
        return {**frames.row(reply.webhook), "secret": reply.secret}

    def webhooks(self, project="", as_frame=True):
        hooks = self._unary("ListWebhooks", pb.ListWebhooksRequest(project=project)).webhooks
        return _maybe_frame(hooks, pb.Webhook.DESCRIPTOR, as_frame)

    def remove_webhook(self, webhook_id):
        self._unary("RemoveWebhook", pb.RemoveWebhookRequest(webhook_id=webhook_id))

    def webhook_deliveries(self, webhook_id, limit=0, as_frame=True):
        """A webhook's deliveries, newest first (`attempts`: a list)."""
        request = pb.ListWebhookDeliveriesRequest(webhook_id=webhook_id, limit=limit)
        deliveries = self._unary("ListWebhookDeliveries", request).deliveries
        return _maybe_frame(deliveries, pb.WebhookDelivery.DESCRIPTOR, as_frame)

    def tokenize(self, model, text):
        if isinstance(text, str):
            text = text.encode()
        return list(self._unary("Tokenize", pb.TokenizeRequest(model=model, text=text)).ids)


class Job:
    """A job of the server; `client.job(id)` re-attaches to one."""

    def __init__(self, client, message):
        self._client = client
        self._message = message

    # --- what the job is
    @property
    def id(self):
        return self._message.id

    @property
    def state(self):
        """"QUEUED", "RUNNING", "SUCCEEDED", "FAILED" or "CANCELLED"."""
        return _state_name(self._message.state)

    @property
    def done(self):
        return self._message.state in _TERMINAL

    @property
    def progress(self):
        return self._message.progress

    @property
    def error(self):
        return self._message.error

    @property
    def message(self):
        """The fca.v1.Job message as last fetched."""
        return self._message

    def refresh(self):
        self._message = self._client._get_job(self.id)
        return self

    def __repr__(self):
        return f"<fca.Job {self.id} {self.state} {self.progress:.0%}>"

    def _repr_html_(self):
        m = self._message
        return frames.html_table([
            ("job", m.id), ("state", self.state), ("progress", f"{m.progress:.0%}"),
            ("models", ", ".join(m.spec.models)), ("owner", m.owner),
            ("eval / calib", f"{m.spec.eval_dataset} / {m.spec.calib_dataset}"),
            ("label", m.spec.label), ("error", m.error)])

    # --- waiting
    def wait(self, progress=True, raise_on_failure=True):
        """Follows the job's events until it ends, with a progress bar
        (tqdm.auto: a widget in Jupyter, text in a terminal; none without
        tqdm or with progress=False). Raises fca.JobFailed when it ends
        FAILED or CANCELLED (unless raise_on_failure=False). Returns self."""
        bar = progress_bar(self.id) if progress else None
        after = 0
        try:
            while not self.done:
                request = pb.WatchJobRequest(job_id=self.id, after_seq=after)
                for reply in self._client._server_stream("WatchJob", request):
                    after = reply.event.seq
                    if reply.HasField("job"):
                        self._message = reply.job
                    if bar is not None and reply.event.HasField("progress"):
                        show_progress(bar, reply.event.progress)
                # The stream ends after the terminal event or when the
                # server bounds it; the job as stored says which.
                self.refresh()
            if bar is not None and self.state == "SUCCEEDED":
                bar.n = bar.total
                bar.set_postfix_str("done")
        finally:
            if bar is not None:
                bar.close()
        if raise_on_failure and self.state != "SUCCEEDED":
            raise errors.JobFailed(self)
        return self

    def cancel(self):
        self._message = self._client._unary("CancelJob", pb.CancelJobRequest(job_id=self.id)).job
        return self

    # --- what it computed
    def results(self, as_frame=True):
        """Every stored row of the job (the same rows as `fca results <id>`)."""
        return self._client.query(job=self.id, as_frame=as_frame)

    def report(self):
        return self._client.report(self.id)

    def windows(self, model="", as_frame=True):
        return self._client.windows(self.id, model, as_frame)

    def coefficients(self, model="", calibration=False, dtype="float32"):
        """The coefficients of `model` [the job's first] on every evaluation
        window of the job (calibration=True: every calibration window), in
        the job's window order, stacked (fca.StackedCoefficients: `array`
        [N, T, C], `save(path)` as .npy or .safetensors)."""
        from fca.stacked import StackedCoefficients
        model = model or self._message.spec.models[0]
        windows = [w for w in self._client.windows(self.id, model, as_frame=False)
                   if w["calibration"] == calibration]
        if not windows:
            kind = "calibration" if calibration else "evaluation"
            raise ValueError(f"job {self.id} has no {kind} windows of {model} to stack")
        return StackedCoefficients([self._client.export(model, w["hash"], dtype) for w in windows])


class Report:
    """A job's report (GetReport) with its tables as DataFrames:

    metrics:       one row per (intervention, metric, model): unit and the
                   Result's fields (value NaN where undefined; its typed key
                   in key_metric, scope, layer, expert, site, family,
                   baseline)
    across_models: one row per (intervention, metric), with its key: n,
                   undefined, mean, sd, min, max across the audited models
    sites:         the per-layer table (model, site, family, layer, mean,
                   variance)
    dense_twin:    the dense twin's execution rows
    """

    def __init__(self, message, info=None):
        self.message = message
        self.job = message.job
        self.models = list(message.models)
        self.interventions = list(message.interventions)
        self._info = info  # () -> GetServerInfoResponse, for layers()

    @property
    def ci_level(self):
        """The job's confidence level (its spec as stored, defaults filled in)."""
        return self.job.spec.ci_level

    def penalties(self):
        """One row per (model, intervention): penalty, its iid CI, its block
        CI, p_holm and the verdicts (fca.tables.penalties)."""
        from fca import tables
        return tables.penalties(self.metrics, self.ci_level)

    def layers(self):
        """One row per (model, intervention, group) of the per-group replays
        with penalty, CI and share of the whole-model penalty
        (fca.tables.layers)."""
        from fca import tables
        if self._info is None:
            raise ValueError("layers() needs the server's group scopes: use client.report(job)")
        return tables.layers(self.metrics, self._info().group_scopes)

    def plot(self):
        """The dashboard's penalty chart and per-layer charts as one matplotlib
        Figure (fca.plot); fig.savefig("report.png") saves it."""
        from fca import plot
        layers = self.layers() if self._info is not None else None
        return plot.plot(self.penalties(), layers, self.models, self.ci_level)

    @property
    def metrics(self):
        rows = []
        for m in self.message.metrics:
            for r in m.per_model:
                rows.append({"unit": m.unit, **frames.result_row(r)})
        return frames.frame(rows, ["unit"] + frames.result_columns(pb.Result.DESCRIPTOR))

    @property
    def across_models(self):
        cols = ["intervention", "metric", *frames.key_columns(pb.ResultKey.DESCRIPTOR), "unit"] + \
            frames.columns(pb.AcrossModels.DESCRIPTOR)
        rows = [{"intervention": m.intervention, "metric": m.metric, **frames.key_row(m.key),
                 "unit": m.unit, **frames.row(m.across_models)} for m in self.message.metrics]
        return frames.frame(rows, cols)

    @property
    def sites(self):
        return frames.messages_frame(self.message.sites, pb.SiteRow.DESCRIPTOR)

    @property
    def dense_twin(self):
        return frames.results_frame(self.message.dense_twin_rows, pb.Result.DESCRIPTOR)

    def pivot(self, metric="penalty"):
        """One metric (its name alone: "penalty", "layer_penalty") as a table
        of values, models in columns; rows by intervention and, for a keyed
        metric, by its key's fields (layer; layer and expert; site; ...)."""
        df = self.metrics
        df = df[df.key_metric == metric]
        keys = [c for c in frames.key_fields(pb.ResultKey.DESCRIPTOR) if df[c].notna().any()]
        return df.pivot_table(index=["intervention", *keys], columns="model", values="value",
                              sort=False)

    def __repr__(self):
        return f"<fca.Report job {self.job.id}: {len(self.models)} model(s), " \
               f"{len(self.message.metrics)} metrics>"

    def _repr_html_(self):
        head = frames.html_table([("job", self.job.id), ("state", _state_name(self.job.state)),
                                  ("models", ", ".join(self.models)),
                                  ("dense twin", self.message.dense_twin or "-")])
        if not frames.have_pandas():
            return head
        table = self.across_models
        table = table[table.metric.isin(["nll", "penalty", "retention_pct"])]
        return head + table.to_html(index=False, na_rep="")
