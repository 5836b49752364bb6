// A stand-in for fca-server's HTTP/JSON gateway, for developing the
// dashboard (server/http/web) and for the browser test until the gateway is
// built in: it serves the dashboard's files as the gateway does (GET / and
// GET /ui/<name>) and answers the gateway's API from canned responses
// recorded from a real fca-server (tests/web/fixtures, written by
// make_fixtures.sh): jobs 1 and 2 finished, job 3 running. Job 3 keeps running
// here: its progress advances with the clock, and its event stream
// (GET /api/v1/jobs/3/events) goes on with new progress events.
//
//   node tests/web/mock_server.js [--port=0] [--api_key=KEY]
// prints "http listening on 127.0.0.1:PORT". Node's http module only.
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');

const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const m = /^--([^=]+)(?:=(.*))?$/.exec(a);
  if (!m) throw new Error(`bad argument ${a}`);
  return [m[1], m[2] ?? 'true'];
}));
const WEB = args.web || path.join(__dirname, '..', '..', 'server', 'http', 'web');
const FIXTURES = args.fixtures || path.join(__dirname, 'fixtures');
// The dashboard's files: every .html, .js and .css file of server/http/web,
// as the gateway embeds them (web_assets_test checks that it embeds them all).
const TYPES = {'.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8'};
const ASSETS = Object.fromEntries(fs.readdirSync(WEB).filter((n) => TYPES[path.extname(n)])
  .map((n) => [n, TYPES[path.extname(n)]]));

const load = (name) => JSON.parse(fs.readFileSync(path.join(FIXTURES, name), 'utf8'));
const models = load('ListModels.json');
// The interventions, metrics and group scopes, from a real server.
const vocabulary = load('GetServerInfo.json');
const jobsList = load('ListJobs.json').jobs;
const jobs = new Map();
const reports = new Map();
const events = new Map();
for (const j of jobsList) {
  const id = String(j.id);
  jobs.set(id, load(`GetJob-${id}.json`).job);
  reports.set(id, load(`GetReport-${id}.json`));
  events.set(id, load(`events-${id}.json`));
}

// The running job: its progress moves on with the clock (about 1% a second).
const started = Date.now();
function running(id) {
  const job = jobs.get(id);
  return job && job.state === 'JOB_STATE_RUNNING';
}
function liveFraction(id) {
  const recorded = events.get(id).filter((e) => e.event.progress);
  const base = recorded.length ? recorded[recorded.length - 1].event.progress.fraction : 0;
  return Math.min(0.99, base + (Date.now() - started) / 100000);
}
function liveJob(id, withTasks) {
  const job = JSON.parse(JSON.stringify(jobs.get(id)));
  if (running(id)) job.progress = liveFraction(id);
  if (!withTasks) job.tasks = [];
  return job;
}

class RpcError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}
function jobOr404(id) {
  const key = String(id);
  if (!jobs.has(key)) throw new RpcError(404, 'NOT_FOUND', `job ${key} not found`);
  return key;
}
const stateOf = (s) => (typeof s === 'number' ? ['JOB_STATE_UNSPECIFIED', 'JOB_STATE_QUEUED',
  'JOB_STATE_RUNNING', 'JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED'][s] : s);

const rpcs = {
  ListModels: () => models,
  GetServerInfo: () => ({server_version: '0.1.0 (mock)', engine_version: 'mock', torch_version: '', devices: ['cpu'],
    dtype: 'float32', workers: 1, executor: 'local', auth: !!args.api_key, max_dataset_bytes: String(256 << 20),
    max_windows: '4096', max_window_length: '4096', max_models: '16', max_queued_jobs_per_user: '16',
    interventions: vocabulary.interventions, metrics: vocabulary.metrics, group_scopes: vocabulary.group_scopes}),
  ListJobs: (req) => {
    const state = stateOf(req.state);
    const list = jobsList.map((j) => liveJob(String(j.id), false)).filter((j) => {
      const s = j.spec;
      if (state && state !== 'JOB_STATE_UNSPECIFIED' && j.state !== state) return false;
      if (req.model && !s.models.includes(req.model) && s.dense_twin !== req.model) return false;
      if (req.label && s.label !== req.label) return false;
      if (req.dataset && s.eval_dataset !== req.dataset && s.calib_dataset !== req.dataset) return false;
      return true;
    });
    const size = Math.min(500, Number(req.page_size) || 50);
    return {jobs: list.slice(0, size), next_page_token: list.length > size ? 'more' : '', total_count: String(list.length)};
  },
  GetJob: (req) => ({job: liveJob(jobOr404(req.job_id), true)}),
  GetReport: (req) => {
    const id = jobOr404(req.job_id);
    return Object.assign({}, reports.get(id), {job: liveJob(id, true)});
  },
  CompareJobs: (req) => {
    const ids = req.job_ids || [];
    if (!ids.length || ids.length > 16) throw new RpcError(400, 'INVALID_ARGUMENT', 'name 1 to 16 jobs');
    return {reports: ids.map((id) => rpcs.GetReport({job_id: id}))};
  },
  QueryResults: (req) => {
    const f = req.filter || {};
    const rows = [];
    for (const [id, rep] of reports) {
      if (f.job_id && String(f.job_id) !== id) continue;
      for (const m of rep.metrics) rows.push(...m.per_model);
    }
    return {results: rows.filter((r) => (!f.model || r.model === f.model) && (!f.metric || r.metric === f.metric)),
      next_page_token: ''};
  },
  // One project (the caller's personal one); the queue of the running jobs,
  // a running task per model, all of that project.
  ListProjects: () => ({projects: [{name: jobsList[0].owner, personal: true, role: 'PROJECT_ROLE_OWNER'}]}),
  GetQueue: () => {
    const active = [...jobs.keys()].filter(running).map((id) => jobs.get(id));
    const tasks = active.reduce((n, j) => n + (j.spec.models || []).length, 0);
    const byModel = new Map();
    for (const j of active) for (const m of j.spec.models || []) byModel.set(m, (byModel.get(m) || 0) + 1);
    return {
      models: [...byModel].sort().map(([model, n]) => ({model, queued_tasks: '0', running_tasks: String(n), loaded_on: [], running_on: ['local/0']})),
      projects: active.length ? [{project: jobsList[0].owner, queued_jobs: '0', running_jobs: String(active.length),
        queued_tasks: '0', running_tasks: String(tasks)}] : [],
      jobs: active.map((j) => ({job_id: String(j.id), project: j.project || j.owner, owner: j.owner, state: j.state,
        position: '0', tasks_ahead: '0', queued_tasks: '0', running_tasks: String((j.spec.models || []).length)})),
      queued_jobs: '0', running_jobs: String(active.length), queued_tasks: '0', running_tasks: String(tasks),
    };
  },
  CancelJob: (req) => {
    const id = jobOr404(req.job_id);
    const job = jobs.get(id);
    if (!running(id)) throw new RpcError(400, 'FAILED_PRECONDITION', `job ${id} has finished`);
    job.state = 'JOB_STATE_CANCELLED';
    job.finished_at = new Date().toISOString();
    return {job: liveJob(id, true)};
  },
};

function sendJson(res, status, body) {
  res.writeHead(status, {'Content-Type': 'application/json', 'Cache-Control': 'no-store'});
  res.end(JSON.stringify(body));
}

// GET /api/v1/jobs/<id>/events?after_seq=N: the recorded events after N,
// then (job still running) a new progress event every 300 ms.
function events_(res, id, after) {
  res.writeHead(200, {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store'});
  const send = (msg) => res.write(`event: job\nid: ${msg.event.seq}\ndata: ${JSON.stringify(msg)}\n\n`);
  const recorded = events.get(id);
  let seq = 0;
  for (const e of recorded) {
    seq = Number(e.event.seq);
    if (seq > after) send(Object.assign({}, e, {job: liveJob(id, false)}));
  }
  if (!running(id)) {
    const last = recorded[recorded.length - 1];
    if (!last || !last.event.state || !/SUCCEEDED|FAILED|CANCELLED/.test(last.event.state)) {
      send({event: {seq: String(++seq), time: new Date().toISOString(), state: jobs.get(id).state}, job: liveJob(id, false)});
    }
    res.end();
    return;
  }
  const lastProgress = [...recorded].reverse().find((e) => e.event.progress);
  const timer = setInterval(() => {
    if (!running(id)) {
      send({event: {seq: String(++seq), time: new Date().toISOString(), state: jobs.get(id).state}, job: liveJob(id, false)});
      clearInterval(timer);
      res.end();
      return;
    }
    const p = Object.assign({}, lastProgress ? lastProgress.event.progress : {phase: 'live'}, {fraction: liveFraction(id)});
    send({event: {seq: String(++seq), time: new Date().toISOString(), progress: p}, job: liveJob(id, false)});
  }, 300);
  res.on('close', () => clearInterval(timer));
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  const authorized = !args.api_key || req.headers.authorization === `Bearer ${args.api_key}`;
  try {
    if (req.method === 'GET' && (url.pathname === '/' || url.pathname.startsWith('/ui/'))) {
      const name = url.pathname === '/' ? 'index.html' : url.pathname.slice(4);
      if (!Object.prototype.hasOwnProperty.call(ASSETS, name)) return sendJson(res, 404, {code: 'NOT_FOUND', message: 'no such file'});
      res.writeHead(200, {'Content-Type': ASSETS[name]});
      return res.end(fs.readFileSync(path.join(WEB, name)));
    }
    if (!authorized) return sendJson(res, 401, {code: 'UNAUTHENTICATED', message: 'missing or unknown API key'});
    const ev = /^\/api\/v1\/jobs\/(\d+)\/events$/.exec(url.pathname);
    if (req.method === 'GET' && ev) {
      return events_(res, jobOr404(ev[1]), Number(url.searchParams.get('after_seq')) || 0);
    }
    const rpc = /^\/api\/v1\/([A-Za-z]+)$/.exec(url.pathname);
    if (req.method === 'POST' && rpc) {
      if (!rpcs[rpc[1]]) return sendJson(res, 501, {code: 'UNIMPLEMENTED', message: `${rpc[1]} is not mocked`});
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => {
        try {
          sendJson(res, 200, rpcs[rpc[1]](body ? JSON.parse(body) : {}));
        } catch (err) {
          sendJson(res, err.status || 400, {code: err.code || 'INVALID_ARGUMENT', message: err.message});
        }
      });
      return undefined;
    }
    return sendJson(res, 404, {code: 'NOT_FOUND', message: `no route ${req.method} ${url.pathname}`});
  } catch (err) {
    return sendJson(res, err.status || 500, {code: err.code || 'INTERNAL', message: err.message});
  }
});
server.listen(Number(args.port || 0), '127.0.0.1', () => {
  console.log(`http listening on 127.0.0.1:${server.address().port}`);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
