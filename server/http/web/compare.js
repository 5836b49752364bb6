// fca dashboard: jobs or models side by side (CompareJobs): one series per
// (job, model), and each job's mean ± sd across its models; with "pool",
// the mean ± sd across every job's models together (PoolJobs).
'use strict';

(() => {
  const {jobF, el, nextId, table, link, jobHref, modelHref, num, stateName, stateBadge, fmtTime,
    shaPrefix, plural, call, vocabulary, inProject, metricFormat, resultCell, acrossCell, barChart,
    reportIndex, section, showError} = window.fca;

  const listParam = (v) => String(v || '').split(',').map((s) => s.trim()).filter(Boolean);

  async function compareView(main, params, signal) {
    document.title = 'Compare · fca';
    let ids = listParam(params.jobs).filter((s) => /^\d+$/.test(s));
    const models = listParam(params.models);
    const jobsInput = el('input', {id: 'compare-jobs', name: 'jobs', value: ids.join(','), size: 16, placeholder: '1,2'});
    const modelsInput = el('input', {id: 'compare-models', name: 'models', value: models.join(','), size: 24, placeholder: 'any'});
    const pool = params.pool === '1';
    const poolInput = el('input', {id: 'compare-pool', name: 'pool', type: 'checkbox', checked: pool});
    main.append(el('h1', {}, 'Compare jobs and models'), el('form', {class: 'filters', onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if (jobsInput.value) q.set('jobs', jobsInput.value);
      if (modelsInput.value) q.set('models', modelsInput.value);
      if (poolInput.checked) q.set('pool', '1');
      location.hash = `#/compare?${q}`.replace(/%2C/g, ',');
    }}, el('label', {for: 'compare-jobs'}, 'job ids', jobsInput), el('label', {for: 'compare-models'}, 'models', modelsInput),
    el('label', {for: 'compare-pool', title: 'the across-model rows over every job\'s models together (finished jobs that agree on data, windows and settings)'}, poolInput, ' pool the jobs'),
    el('button', {type: 'submit'}, 'Compare')));
    // By model: one finished job per model, the newest unless `pick`
    // (model:job,...) names another; the page says which and offers the
    // others.
    let picked = null;
    if (!ids.length && models.length) {
      picked = await pickJobs(main, models, params, signal);
      ids = [...new Set(picked.values())];
      if (!ids.length) {
        main.append(el('p', {}, 'No finished job audited these models.'));
        return;
      }
    }
    if (!ids.length) {
      main.append(el('p', {class: 'note'}, 'Name job ids (e.g. 1,2) and optionally models, or tick jobs in the job list or models on the models page.'));
      return;
    }
    const [res, vocab] = await Promise.all([call('CompareJobs', {job_ids: ids.slice(0, 16)}, signal), vocabulary()]);
    const reports = res.reports || [];
    // One series per (job, model); mean ± sd rows per job of several models.
    const series = [];
    const across = [];
    for (const rep of reports) {
      const ix = reportIndex(rep);
      const jid = String(rep.job.id);
      for (const m of ix.models) {
        if (models.length && !models.includes(m)) continue;
        if (picked && picked.get(m) !== jid) continue;
        series.push({label: `job ${jid} · ${m}`, ix, model: m, job: jid});
      }
      if (!models.length && !picked && ix.models.length > 1) across.push({label: `job ${jid} · mean ± sd [min, max]`, ix, job: jid});
    }
    if (pool && !models.length && !picked) {
      const pooled = await poolRow(main, ids, signal);
      if (pooled) across.push(pooled);
    }
    main.append(table({caption: 'Jobs compared', id: 'compare-jobs-table', head: ['job', 'state', 'label', 'models', 'dense twin', 'eval sha256', 'created'],
      rows: reports.map((rep) => {
        const j = rep.job || {};
        return {th: link(jobHref(j.id), String(j.id)), key: String(j.id), cells: [el('td', {}, stateBadge(j.state)), el('td', {}, (j.spec || {}).label || ''),
          el('td', {}, (rep.models || []).length ? (rep.models || []).map((m, k) => [k ? ', ' : '', link(modelHref(m), m)]) : 'no rows yet'),
          el('td', {}, rep.dense_twin || ''), el('td', {}, el('code', {}, shaPrefix(rep.eval_sha256))), el('td', {}, fmtTime(j.created_at))]};
      })}));
    if (!series.length) {
      main.append(el('p', {}, 'None of these jobs has result rows for the chosen models yet.'));
      return;
    }
    const interventions = vocab.interventions.filter((i) => i !== 'correct' && series.some((s) => s.ix.find(s.model, i, 'penalty')));
    const f = metricFormat('penalty').f;
    main.append(section('Penalties', 'penalty = NLL(I) − NLL(correct) in nats/token with the 95% bootstrap CI; one bar per job and model.',
      barChart({title: 'Penalty per intervention (nats/token, 95% CI)', yLabel: 'penalty (nats/token)', id: 'compare-penalty-chart',
        series: series.map((s) => s.label), groups: interventions.map((i) => ({label: i, bars: series.map((s, k) => {
          const r = s.ix.find(s.model, i, 'penalty');
          if (!r || !r.defined) return null;
          return {k, value: num(r.value), lo: num(r.ci_low), hi: num(r.ci_high), tip: `${s.label} ${i}: ${f(num(r.value))}`};
        }).filter(Boolean)}))}),
      compareTable('Penalty per intervention (nats/token, 95% CI)', 'compare-penalty', series, across,
        interventions.map((i) => ({text: i, i, m: 'penalty'})))));
    const profiles = vocab.profiles.filter((i) => series.some((s) => s.ix.find(s.model, i, 'retention_pct')));
    main.append(section('Gap retention', 'Share of the gap NLL(global_mean) − NLL(correct) that each static profile retains (%).',
      profiles.length ? compareTable('Gap retention (%)', 'compare-retention', series, across,
        profiles.map((i) => ({text: i, i, m: 'retention_pct'}))) : el('p', {}, 'No retention rows.')));
    const families = [...new Set(reports.flatMap((r) => r.families || []))].sort();
    main.append(section('Coefficient variation', 'eta2 per family: the share of the coefficients\' variance explained by the site (layer).',
      families.length ? compareTable('eta2 per family', 'compare-eta2', series, across,
        families.map((fam) => ({text: `eta2 ${fam}`, i: 'variation', m: {metric: 'eta2', family: fam}}))) : el('p', {}, 'No variation rows.')));
    const empty = reports.filter((r) => !(r.models || []).length);
    if (empty.length) {
      main.append(el('p', {class: 'note'}, `No rows yet for ${empty.map((r) => `job ${r.job.id} (${stateName(r.job.state)})`).join(', ')}.`));
    }
  }

  // The jobs pooled (PoolJobs): a table of which job each model came from,
  // and the pooled across-model row for the tables below; null, with the
  // server's refusal shown (which fields differ, and each job's value),
  // when they cannot be pooled.
  async function poolRow(main, ids, signal) {
    const box = el('section', {id: 'compare-pool-section', 'aria-label': 'Pooled jobs'});
    main.append(box);
    let res;
    try {
      res = await call('PoolJobs', {job_ids: ids}, signal);
    } catch (err) {
      if (signal.aborted) throw err;
      box.append(el('p', {class: 'note'}, `Jobs ${ids.join(', ')} cannot be pooled:`));
      showError(box, err);
      return null;
    }
    const label = `pooled jobs ${ids.join(', ')} · mean ± sd [min, max]`;
    box.append(table({caption: 'Pooled: the job each model came from', id: 'compare-pool-models', head: ['model', 'job', 'weights sha256'],
      rows: (res.models || []).map((m) => ({th: link(modelHref(m.model), m.model), key: `${m.job_id}/${m.model}`,
        cells: [el('td', {}, link(jobHref(m.job_id), String(m.job_id))), el('td', {}, el('code', {}, shaPrefix(m.weights_sha256)))]}))}));
    return {label, ix: reportIndex(res.report), job: 'pooled'};
  }

  // The finished jobs that audited each model, newest first, and the one
  // chosen for each (params.pick "model:job,...", else the newest), shown
  // as a form whose selects switch the job; returns Map model -> job id.
  async function pickJobs(main, models, params, signal) {
    const asked = new Map(listParam(params.pick).map((p) => p.split(':')).filter((p) => p.length === 2));
    const chosen = new Map();
    const items = [];
    for (const m of models) {
      const res = await call('ListJobs', inProject({model: m, state: 'JOB_STATE_SUCCEEDED', page_size: 50}), signal);
      const jobs = (res.jobs || []).filter((j) => jobF.models(j).includes(m));
      if (!jobs.length) {
        items.push(el('li', {'data-model': m}, `${m}: no finished job audited it.`));
        continue;
      }
      const want = asked.get(m);
      const pick = jobs.find((j) => jobF.id(j) === want) || jobs[0];
      chosen.set(m, jobF.id(pick));
      const id = nextId('pick');
      const select = el('select', {id, name: m, 'data-model': m, onchange: () => {
        const q = new URLSearchParams({models: models.join(','),
          pick: [...chosen].map(([mm, j]) => `${mm}:${mm === m ? select.value : j}`).join(',')});
        location.hash = `#/compare?${q}`.replace(/%2C/g, ',').replace(/%3A/g, ':');
      }}, jobs.map((j, k) => el('option', {value: jobF.id(j), selected: j === pick},
        `job ${jobF.id(j)}${jobF.label(j) ? ` (${jobF.label(j)})` : ''}, finished ${fmtTime(jobF.finishedAt(j))}${k === 0 ? ', newest' : ''}`)));
      const which = pick === jobs[0] ? 'the newest of its' : 'chosen from its';
      items.push(el('li', {'data-model': m, 'data-job': jobF.id(pick)}, el('label', {for: id}, `${m}: `),
        link(jobHref(jobF.id(pick)), `job ${jobF.id(pick)}`), ` (${which} ${plural(jobs.length, 'finished job')}) `, select));
    }
    main.append(el('section', {'aria-label': 'Jobs used for each model'}, el('p', {class: 'note'},
      'Each model\'s row comes from one finished job; pick another to compare that one instead.'),
    el('ul', {id: 'compare-picked', class: 'picked'}, items)));
    return chosen;
  }

  // Rows: one per series (job, model) and per job's mean ± sd; columns:
  // the given (intervention, metric)s.
  function compareTable(caption, id, series, across, columns) {
    return table({caption, id, head: ['job · model', ...columns.map((c) => ({text: c.text, num: true}))],
      rows: [
        ...series.map((s, k) => ({th: `${k + 1}. ${s.label}`, key: `${s.job}/${s.model}`,
          cells: columns.map((c) => resultCell(s.ix.find(s.model, c.i, c.m), c.m, {'data-job': s.job}))})),
        ...across.map((a) => ({th: a.label, cls: 'across', key: `${a.job}/across`,
          cells: columns.map((c) => acrossCell(a.ix.metric(c.i, c.m), {'data-job': a.job}))})),
      ]});
  }

  Object.assign(window.fca, {compareView});
})();
