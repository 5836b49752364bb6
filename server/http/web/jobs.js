// fca dashboard: the job list with its filters, the queue (GetQueue) and
// one job's page (live progress over server-sent events, its tasks and
// its report).
'use strict';

(() => {
  const {STATES, TERMINAL, QUEUE_OPEN_STORE, SETTINGS_OPEN_STORE, el, table, collapsible, link, jobHref, modelHref,
    num, stateName, stateBadge, fmtTime, shortTime, plural, call, vocabulary, watchJob, poll, showError, inProject,
    renderReport, renderHeadline} = window.fca;

  // ------------------------------------------------------------ job lists

  function progressBar(fraction, label, big) {
    const pct = Math.max(0, Math.min(100, 100 * (num(fraction) || 0)));
    return el('span', {class: `bar${big ? ' big' : ''}`, role: 'progressbar', 'aria-label': label,
      'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': pct.toFixed(1), 'data-fraction': num(fraction) || 0},
    el('span', {style: `width: ${pct.toFixed(2)}%`}));
  }

  // The jobs table; `selected`: a Set of job ids ticked for comparison.
  // Narrow enough for a 1280 px screen without scrolling: the compare box
  // sits beside the job's number, times are to the minute, and the free-text
  // columns (models, label, owner, project) wrap where a long value would
  // widen the table.
  function jobsTable(jobs, caption, selected, id) {
    const wrap = (...kids) => el('td', {class: 'wrap'}, kids);
    const box = table({caption, id, head: ['job', 'state', 'progress', 'models', 'dense twin', 'eval / calib',
      'label', 'owner', 'project', 'created', 'finished'],
    rows: jobs.map((j) => {
      const jid = String(j.id);
      const state = stateName(j.state);
      const spec = j.spec || {};
      const tick = el('input', {type: 'checkbox', 'aria-label': `Compare job ${jid}`, checked: selected.has(jid),
        onchange: (e) => (e.target.checked ? selected.add(jid) : selected.delete(jid))});
      const pct = `${(100 * (num(j.progress) || 0)).toFixed(0)}%`;
      return {th: [tick, ' ', link(jobHref(jid), jid)], key: jid, cells: [
        el('td', {'data-state': state}, stateBadge(j.state), j.cancel_requested && !TERMINAL.has(state) ? ' (cancelling)' : ''),
        el('td', {}, state === 'RUNNING' || state === 'QUEUED'
          ? [progressBar(j.progress, `Progress of job ${jid}`), ` ${pct}`] : ''),
        wrap((spec.models || []).map((m, k) => [k ? ', ' : '', link(modelHref(m), m)])),
        wrap(spec.dense_twin ? link(modelHref(spec.dense_twin), spec.dense_twin) : ''),
        wrap(`${spec.eval_dataset || ''} / ${spec.calib_dataset || ''}`),
        wrap(spec.label || ''),
        el('td', {class: 'owner wrap'}, j.owner || ''),
        el('td', {class: 'project wrap'}, j.project || ''),
        wrap(shortTime(j.created_at)),
        wrap(shortTime(j.finished_at)),
      ]};
    })});
    box.querySelector('table').classList.add('jobs');
    return box;
  }

  function compareButton(selected, extra) {
    return el('button', {type: 'button', onclick: () => {
      const ids = [...selected].sort((a, b) => a - b);
      if (!ids.length) return;
      location.hash = `#/compare?jobs=${ids.join(',')}${extra || ''}`;
    }}, 'Compare selected jobs');
  }

  async function modelNames(signal) {
    try {
      return ((await call('ListModels', {}, signal)).models || []).map((m) => m.name);
    } catch (err) {
      if (signal.aborted) throw err;
      return null;
    }
  }

  async function jobsView(main, params, signal) {
    document.title = 'Jobs · fca';
    const names = await modelNames(signal);
    const field = (label, control) => el('label', {}, label, control);
    const state = el('select', {name: 'state'}, el('option', {value: ''}, 'any'),
      STATES.map((s) => el('option', {value: s, selected: params.state === s}, s)));
    const model = names
      ? el('select', {name: 'model'}, el('option', {value: ''}, 'any'),
        names.map((n) => el('option', {value: n, selected: params.model === n}, n)))
      : el('input', {name: 'model', value: params.model || ''});
    const label = el('input', {name: 'label', value: params.label || '', size: 12});
    const dataset = el('input', {name: 'dataset', value: params.dataset || '', size: 12});
    const form = el('form', {class: 'filters', role: 'search', 'aria-label': 'Filter jobs', onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const [k, c] of [['state', state], ['model', model], ['label', label], ['dataset', dataset]]) {
        if (c.value) q.set(k, c.value);
      }
      location.hash = `#/jobs${q.toString() ? '?' + q : ''}`;
    }}, field('state', state), field('model', model), field('label', label), field('dataset', dataset),
    el('button', {type: 'submit'}, 'Filter'), el('a', {href: '#/jobs'}, 'clear'));
    const selected = new Set();
    const holder = el('div');
    const status = el('p', {class: 'note', 'aria-live': 'polite'});
    let limit = 50;
    let shown = '';
    const more = el('button', {type: 'button', hidden: true, onclick: () => { limit = Math.min(500, limit + 50); refresh(); }}, 'Show more');
    // The job list first; the queue (a collapsible panel) after it.
    main.append(el('h1', {}, 'Jobs'), form, el('p', {}, compareButton(selected)), holder, more, status,
      queuePanel(signal));
    async function refresh() {
      const req = inProject({page_size: limit});
      if (params.state) req.state = `JOB_STATE_${params.state}`;
      for (const k of ['model', 'label', 'dataset']) if (params[k]) req[k] = params[k];
      const res = await call('ListJobs', req, signal);
      const jobs = res.jobs || [];
      const total = res.total_count !== undefined ? num(res.total_count) : jobs.length;
      const seen = JSON.stringify(res);
      if (seen === shown) return;  // unchanged: keep the table (and focus) as it is
      shown = seen;
      holder.replaceChildren(jobsTable(jobs, `Jobs, newest first: ${jobs.length} of ${total} shown (updated live; times UTC)`, selected, 'jobs-table'));
      more.hidden = !res.next_page_token;
    }
    await poll(refresh, 2000, signal, status);
  }

  // ------------------------------------------------------------- the queue

  // The front page's queue (GetQueue): totals, each model's tasks and the
  // server's workers holding it loaded or running it, the caller's projects
  // (the server sums the others in one unnamed row) and the caller's own
  // jobs with their places in line. Refreshed every few seconds. It
  // collapses to its totals (the choice is remembered).
  function queuePanel(signal) {
    const n = (v) => num(v) || 0;
    const counts = (o, ...keys) => keys.map((k) => el('td', {class: 'num', 'data-field': k}, String(n(o[k]))));
    const totals = el('span', {id: 'queue-totals'});
    const holder = el('div');
    const status = el('p', {class: 'note', 'aria-live': 'polite'});
    const panel = collapsible(QUEUE_OPEN_STORE, true, {id: 'queue', class: 'queue', 'aria-labelledby': 'queue-title'},
      [el('h2', {id: 'queue-title'}, 'Queue'), ' ', totals], holder, status);
    let shown = '';
    async function refresh() {
      const q = await call('GetQueue', {}, signal);
      const seen = JSON.stringify(q);
      if (seen === shown) return;
      shown = seen;
      totals.textContent = `${plural(n(q.queued_jobs), 'job')} queued, ${n(q.running_jobs)} running ` +
        `(tasks: ${n(q.queued_tasks)} queued, ${n(q.running_tasks)} running).`;
      const parts = [];
      if ((q.models || []).length) {
        parts.push(table({caption: 'Models: tasks of your projects, and where loaded', id: 'queue-models',
          head: ['model', {text: 'queued tasks', num: true}, {text: 'running tasks', num: true}, 'loaded on', 'running on'],
          rows: q.models.map((m) => ({th: link(modelHref(m.model), m.model), key: m.model, cells: [
            ...counts(m, 'queued_tasks', 'running_tasks'),
            el('td', {}, (m.loaded_on || []).join(', ')), el('td', {}, (m.running_on || []).join(', '))]}))}));
      }
      if ((q.projects || []).length) {
        parts.push(table({caption: 'Projects', id: 'queue-projects',
          head: ['project', {text: 'queued jobs', num: true}, {text: 'running jobs', num: true},
            {text: 'queued tasks', num: true}, {text: 'running tasks', num: true}],
          rows: q.projects.map((p) => ({th: p.project || 'other projects', key: p.project || '', cells:
            counts(p, 'queued_jobs', 'running_jobs', 'queued_tasks', 'running_tasks')}))}));
      }
      if ((q.jobs || []).length) {
        parts.push(table({caption: 'Your jobs in the queue', id: 'queue-jobs',
          head: ['job', 'project', 'state', {text: 'place', num: true}, {text: 'tasks ahead', num: true}],
          rows: q.jobs.map((j) => ({th: link(jobHref(j.job_id), String(j.job_id)), key: String(j.job_id), cells: [
            el('td', {}, j.project || ''), el('td', {}, stateBadge(j.state)),
            el('td', {class: 'num'}, n(j.position) ? String(n(j.position)) : '–'),
            el('td', {class: 'num'}, String(n(j.tasks_ahead)))]}))}));
      }
      holder.replaceChildren(...parts);
    }
    poll(refresh, 3000, signal, status);
    return panel;
  }

  // ------------------------------------------------------------- one job

  function specList(job) {
    const s = job.spec || {};
    const items = [
      ['owner', job.owner], ['label', s.label], ['models', (s.models || []).map((m, k) => [k ? ', ' : '', link(modelHref(m), m)])],
      ['dense twin', s.dense_twin ? link(modelHref(s.dense_twin), s.dense_twin) : ''],
      ['evaluation / calibration', `${s.eval_dataset || ''} / ${s.calib_dataset || ''}`],
      ['dataset sha256 (eval / calib)', job.provenance ? `${job.provenance.eval_sha256} / ${job.provenance.calib_sha256}` : ''],
      ['server version', (job.provenance || {}).server_version],
      ['interventions', (s.interventions || []).length ? s.interventions.join(', ') : 'all'],
      ['window length', s.window_length], ['batch size', s.batch_size], ['seed', s.seed],
      ['bootstrap resamples', s.bootstrap_resamples], ['CI level', s.ci_level],
      ['created', fmtTime(job.created_at)], ['started', fmtTime(job.started_at)], ['finished', fmtTime(job.finished_at)],
      ['attempts', job.attempts], ['error', job.error],
      // What the server knows but its store could not record yet (Job.notice).
      ['notice', job.notice],
    ].filter(([, v]) => v !== undefined && v !== '' && !(Array.isArray(v) && !v.length));
    return el('dl', {class: 'spec'}, items.map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  }

  function tasksTable(job) {
    return table({caption: 'Tasks (one per audited model)', id: 'tasks-table',
      head: ['#', 'model', 'state', {text: 'attempts', num: true}, 'worker', 'placement', 'started', 'finished', 'error'],
      rows: (job.tasks || []).map((t) => ({th: String(num(t.index) + 1), cells: [
        el('td', {}, link(modelHref(t.model), t.model)), el('td', {}, stateBadge(t.state)),
        el('td', {class: 'num'}, t.attempts), el('td', {}, t.worker), el('td', {}, t.placement),
        el('td', {}, fmtTime(t.started_at)), el('td', {}, fmtTime(t.finished_at)), el('td', {}, t.error)]}))});
  }

  // What each task ran on (docs/fca.md "Reproducibility"); nothing for jobs
  // stored before provenance was kept.
  function provenanceTable(job) {
    const rows = (job.tasks || []).filter((t) => t.provenance && t.provenance.worker);
    if (!rows.length) return '';
    const windows = (n, cached) => `${num(n)} (${num(cached)} cached)`;
    return table({caption: 'Provenance (what each task ran on)', id: 'provenance-table',
      head: ['model', 'worker', 'host', 'engine', 'torch', 'device', 'dtype', {text: 'threads', num: true}, 'eval windows', 'calib windows', 'weights sha256'],
      rows: rows.map((t) => { const p = t.provenance; return {th: t.model, cells: [
        el('td', {}, p.worker), el('td', {}, p.host), el('td', {}, p.engine_version), el('td', {}, p.torch_version),
        el('td', {}, p.device), el('td', {}, p.dtype), el('td', {class: 'num'}, p.threads),
        el('td', {}, windows(p.eval_windows, p.cached_eval_windows)), el('td', {}, windows(p.calib_windows, p.cached_calib_windows)),
        el('td', {}, el('code', {}, p.weights_sha256))]}; })});
  }

  function progressText(p, fraction) {
    const pct = `${(100 * (num(fraction) || 0)).toFixed(1)}%`;
    if (!p) return pct;
    const parts = [pct, p.phase || 'waiting'];
    if (p.model) parts.push(`${p.model} (${num(p.model_index) + 1}/${num(p.model_count)})`);
    const unit = p.phase === 'timing' ? 'pairs' : 'windows';  // timing times (model, twin) pairs
    if (num(p.windows_total) > 0) parts.push(`${unit} ${num(p.windows_done)}/${num(p.windows_total)}`);
    if (num(p.eta_seconds) > 0) parts.push(`about ${Math.ceil(num(p.eta_seconds))} s left`);
    return parts.join(' · ');
  }

  // What the settings panel says while closed: the job's models and data.
  function settingsSummary(job) {
    const s = job.spec || {};
    return ['Settings', (s.models || []).join(', '), s.dense_twin ? `dense twin ${s.dense_twin}` : '',
      `${s.eval_dataset || ''} / ${s.calib_dataset || ''}`, s.label ? `label ${s.label}` : ''].filter(Boolean).join(' · ');
  }

  // A job's page, in the order a reader wants it: while the job runs, its
  // progress first (above the fold on a phone); once results are stored,
  // their headline (verdicts and penalties, headline.js); then the
  // settings (collapsible), tasks, events and the full report.
  async function jobView(main, id, signal) {
    document.title = `Job ${id} · fca`;
    let job = (await call('GetJob', {job_id: String(id)}, signal)).job;
    const failure = el('div');
    const live = el('div', {id: 'job-live'});
    const headline = el('div', {id: 'job-headline'});
    const actions = el('p');
    const spec = el('div');
    const settings = collapsible(SETTINGS_OPEN_STORE, false, {id: 'job-settings', class: 'settings'}, el('span'), spec);
    const tasks = el('div');
    const log = el('ol', {class: 'log', 'aria-label': 'Events'});
    const report = el('div', {id: 'report', 'aria-live': 'off'});
    const h1 = el('h1');
    main.append(h1, failure, live, headline, actions, settings, tasks, el('details', {}, el('summary', {}, 'Events'), log),
      el('section', {}, el('h2', {}, 'Report'), el('p', {class: 'note'}, 'What the server stored for this job; `fca report ', String(id), '` prints the same tables.'), report));
    let lastProgress = null;

    function renderHead() {
      const state = stateName(job.state);
      h1.replaceChildren(`Job ${job.id} `, stateBadge(job.state));
      h1.setAttribute('data-state', state);
      // Why a job failed, before anything else (the settings list it too).
      failure.replaceChildren(state === 'FAILED' && job.error
        ? el('p', {class: 'error', id: 'job-error'}, el('strong', {}, 'The job failed: '), job.error) : '');
      actions.replaceChildren(link(`#/compare?jobs=${job.id}`, 'Compare with other jobs'));
      if (!TERMINAL.has(state)) {
        actions.append(' ', el('button', {type: 'button', disabled: job.cancel_requested, onclick: async () => {
          if (!confirm(`Cancel job ${job.id}?`)) return;
          try { job = (await call('CancelJob', {job_id: String(job.id)}, signal)).job; renderHead(); } catch (err) { showError(live, err); }
        }}, job.cancel_requested ? 'Cancelling…' : 'Cancel job'));
      }
      settings.querySelector('summary').textContent = settingsSummary(job);
      spec.replaceChildren(specList(job));
      // A finished job's progress says nothing its state does not.
      if (state === 'SUCCEEDED') {
        live.replaceChildren();
      } else {
        const text = el('span', {class: 'progress-text', id: 'job-progress-text'}, progressText(lastProgress, job.progress));
        live.replaceChildren(el('h2', {}, 'Progress'), el('p', {}, progressBar(job.progress, `Progress of job ${job.id}`, true), text));
        live.querySelector('[role=progressbar]').id = 'job-progress';
      }
      tasks.replaceChildren(tasksTable(job), provenanceTable(job));
    }
    let reportTimer = null;
    async function loadReport() {
      reportTimer = null;
      try {
        const [rep, vocab] = await Promise.all([call('GetReport', {job_id: String(id)}, signal), vocabulary()]);
        headline.replaceChildren(...renderHeadline(rep, vocab));
        report.replaceChildren(...renderReport(rep, vocab));
      } catch (err) {
        if (!signal.aborted) showError(report, err);
      }
    }
    const reportSoon = () => { if (!reportTimer) reportTimer = setTimeout(loadReport, 400); };
    signal.addEventListener('abort', () => clearTimeout(reportTimer));

    renderHead();
    await loadReport();
    if (TERMINAL.has(stateName(job.state))) return;
    await watchJob(id, async (msg) => {
      const e = msg.event || {};
      const tasksBefore = job.tasks;
      const noticeBefore = job.notice;
      job = Object.assign({}, job, msg.job || {});
      if (!(msg.job && msg.job.tasks && msg.job.tasks.length)) job.tasks = tasksBefore;
      if (e.progress) {
        lastProgress = e.progress;
        const bar = document.getElementById('job-progress');
        const fraction = num(e.progress.fraction);
        if (bar) {
          const pct = Math.max(0, Math.min(100, 100 * fraction));
          bar.setAttribute('aria-valuenow', pct.toFixed(1));
          bar.setAttribute('data-fraction', fraction);
          bar.firstChild.style.width = `${pct.toFixed(2)}%`;
          document.getElementById('job-progress-text').textContent = progressText(e.progress, fraction);
        }
        return;
      }
      const when = fmtTime(e.time);
      if (e.message !== undefined) log.append(el('li', {}, `${when} ${e.message}`));
      if (job.notice !== noticeBefore) renderHead();
      if (e.results) {
        log.append(el('li', {}, `${when} results stored for ${e.results.model}`));
        reportSoon();
      }
      if (e.state !== undefined) {
        log.append(el('li', {}, `${when} state ${stateName(e.state)}`));
        try { job = (await call('GetJob', {job_id: String(id)}, signal)).job; } catch (err) { /* next event */ }
        renderHead();
        if (TERMINAL.has(stateName(e.state))) reportSoon();
      }
    }, signal);
  }

  Object.assign(window.fca, {jobsTable, compareButton, jobsView, jobView});
})();
