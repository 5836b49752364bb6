// The web dashboard in a real browser: Debian's chromium, headless, driven by
// puppeteer-core, against a server whose HTTP address is given (the real
// fca-server with its gateway; tests/web/run_dashboard_test.sh starts it
// with a finished job 1 and a running job 2).
//
//   node dashboard_test.js --url=http://127.0.0.1:PORT --report_json=FILE
//       --out=DIR [--api_key=KEY] [--finished=1] [--running=2]
//       [--chromium=/usr/bin/chromium]
//
// Checks: the job list shows both jobs with their live state (and its
// filters work); the finished job's page shows the numbers of
// `fca report --save_json` (FILE); the running job's progress advances live
// over server-sent events; the comparison view shows both models; model
// pages list their jobs; tables have captions and header scopes and the
// page does not overflow a phone's width; no console errors; no request
// leaves the server. Writes one PNG per page into DIR. The last line is
// "N passed, M failed".
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');

const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const m = /^--([^=]+)(?:=(.*))?$/.exec(a);
  if (!m) throw new Error(`bad argument ${a}`);
  return [m[1], m[2] ?? 'true'];
}));
for (const required of ['url', 'report_json', 'out']) {
  if (!args[required]) {
    console.error(`usage: node dashboard_test.js --url=http://HOST:PORT --report_json=FILE --out=DIR`);
    process.exit(2);
  }
}
const BASE = args.url.replace(/\/$/, '');
const HOST = new URL(BASE).host;
const FINISHED = String(args.finished || '1');
const RUNNING = String(args.running || '2');
const OUT = args.out;
const REPORT = reportByModel(JSON.parse(fs.readFileSync(args.report_json, 'utf8')));

// `fca report --save_json` writes the GetReport message (fca's one JSON:
// proto names, int64 as strings, an undefined row has "defined": false).
// The checks below read it per model: {models: [{model, results, sites}],
// dense_twin_execution, across_models}, with null for an undefined value.
function reportByModel(report) {
  const row = (r) => {
    const out = {intervention: r.intervention, metric: r.metric, value: r.defined ? r.value : null, n: Number(r.n)};
    if (r.ci_low !== undefined) out.ci_low = r.ci_low;
    if (r.ci_high !== undefined) out.ci_high = r.ci_high;
    return out;
  };
  const metrics = report.metrics || [];
  const models = (report.models || []).map((model) => ({
    model,
    results: metrics.flatMap((m) => m.per_model.filter((r) => r.model === model).map(row)),
    sites: (report.sites || []).filter((s) => s.model === model),
  }));
  const across = metrics.map((m) => {
    const a = m.across_models || {};
    const n = Number(a.n || 0);
    return {intervention: m.intervention, metric: m.metric, unit: m.unit, n_models: n, undefined: Number(a.undefined || 0),
      mean: n > 0 ? a.mean : null, sd: n > 0 ? a.sd : null, min: n > 0 ? a.min : null, max: n > 0 ? a.max : null};
  });
  const twin = report.dense_twin ? {model: report.dense_twin, results: (report.dense_twin_rows || []).map(row)} : undefined;
  return {models, dense_twin_execution: twin, across_models: across};
}

let passed = 0;
let failed = 0;
function check(ok, what, detail) {
  if (ok) {
    passed++;
    console.log(`ok - ${what}`);
  } else {
    failed++;
    console.log(`not ok - ${what}${detail ? `\n    ${String(detail).split('\n').join('\n    ')}` : ''}`);
  }
  return ok;
}

// The numbers a cell shows, with how far each may be from the stored value
// (half a unit in its last shown digit).
function shownNumbers(text) {
  const out = [];
  for (const m of text.matchAll(/[+-]?\d+(?:\.(\d+))?(?:e([+-]?\d+))?/g)) {
    const decimals = m[1] ? m[1].length : 0;
    const exp = m[2] ? Number(m[2]) : 0;
    out.push({value: Number(m[0]), tol: 0.5 * Math.pow(10, exp - decimals) * 1.000001 + 1e-12});
  }
  return out;
}
const close = (a, b) => Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(b));

async function shot(page, name) {
  const file = path.join(OUT, `${name}.png`);
  await page.screenshot({path: file, fullPage: true});
  console.log(`# screenshot ${file}`);
}

// Every table has a caption, a header row of th scope="col", and th
// scope="row" row headers; no element makes the page wider than a phone.
async function checkAccessible(page, name) {
  const problems = await page.evaluate(() => {
    const out = [];
    document.querySelectorAll('table').forEach((t, i) => {
      const label = t.id || `table ${i}`;
      if (!t.caption || !t.caption.textContent.trim()) out.push(`${label}: no caption`);
      t.querySelectorAll('thead th').forEach((th) => { if (th.getAttribute('scope') !== 'col') out.push(`${label}: header without scope=col`); });
      t.querySelectorAll('tbody tr').forEach((tr) => {
        const th = tr.querySelector('th');
        if (!th || th.getAttribute('scope') !== 'row') out.push(`${label}: row without a th scope=row`);
      });
      if (!t.parentElement.classList.contains('table-wrap')) out.push(`${label}: not in a scrolling wrapper`);
    });
    document.querySelectorAll('svg.chart').forEach((s, i) => {
      if (s.getAttribute('role') !== 'img' || !s.querySelector('title')) out.push(`chart ${i}: no role=img and title`);
    });
    if (!document.querySelector('meta[name=viewport]')) out.push('no viewport meta');
    return out;
  });
  check(problems.length === 0, `${name}: tables have captions and header scopes, charts have titles`, problems.slice(0, 10).join('\n'));
  const size = page.viewport();
  await page.setViewport({width: 390, height: 800});
  await new Promise((r) => setTimeout(r, 200));
  const widths = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
  check(widths[0] <= widths[1], `${name}: nothing overflows a 390 px wide page (tables scroll in their box)`, `scrollWidth ${widths[0]} > ${widths[1]}`);
  await page.setViewport(size);
}

async function main() {
  fs.mkdirSync(OUT, {recursive: true});
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'fca-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: args.chromium || '/usr/bin/chromium',
    headless: true,
    userDataDir: profile,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  const consoleErrors = [];
  const foreign = [];
  const requests = [];
  try {
    const page = await browser.newPage();
    await page.setViewport({width: 1280, height: 900});
    page.on('console', (msg) => {
      if (msg.type() === 'error') consoleErrors.push(`${msg.text()} (${(msg.location() || {}).url || ''})`);
    });
    page.on('pageerror', (err) => consoleErrors.push(`page error: ${err.message}`));
    // No request leaves the server: every request is seen here, and any to
    // another host is refused and counted.
    await page.setRequestInterception(true);
    page.on('request', (req) => {
      const url = req.url();
      requests.push(url);
      if (url.startsWith('data:') || url.startsWith('blob:')) return req.continue();
      let u;
      try { u = new URL(url); } catch (e) { u = null; }
      if (!u || u.protocol !== 'http:' || u.host !== HOST) {
        foreign.push(url);
        return req.abort('blockedbyclient');
      }
      return req.continue();
    });

    // ------------------------------------------------------------ sign in
    // With API keys on, the page asks for one, keeps it in sessionStorage
    // and sends it as a bearer token (the refused calls before that are
    // the expected 401s, not errors of the page).
    await page.goto(`${BASE}/#/jobs`, {waitUntil: 'load'});
    if (args.api_key) {
      await page.waitForSelector('#login:not([hidden])', {timeout: 30000});
      check(true, 'sign in: the page asks for an API key');
      await page.waitForNetworkIdle({idleTime: 300, timeout: 10000}).catch(() => {});
      await page.type('#api-key', args.api_key);
      await page.click('#login button[type=submit]');
      await page.waitForSelector('#signed-in:not([hidden])', {timeout: 30000});
      const stored = await page.evaluate(() => sessionStorage.getItem('fca.apiKey'));
      check(stored === args.api_key, 'sign in: the key is kept in sessionStorage');
      consoleErrors.length = 0;
    } else {
      check(await page.$('#login[hidden]') !== null, 'no API keys: no login box');
    }

    // ---------------------------------------------------------- job list
    await page.waitForSelector(`#jobs-table tr[data-key="${FINISHED}"]`, {timeout: 30000});
    await page.waitForSelector(`#jobs-table tr[data-key="${RUNNING}"]`, {timeout: 30000});
    const states = await page.$$eval('#jobs-table tbody tr', (rows) =>
      Object.fromEntries(rows.map((r) => [r.dataset.key, r.querySelector('[data-state]').dataset.state])));
    check(states[FINISHED] === 'SUCCEEDED', `job list: job ${FINISHED} is SUCCEEDED`, JSON.stringify(states));
    check(states[RUNNING] === 'RUNNING', `job list: job ${RUNNING} is RUNNING`, JSON.stringify(states));
    check(await page.$(`#jobs-table tr[data-key="${RUNNING}"] [role=progressbar]`) !== null,
      'job list: the running job has a progress bar');
    const headerScope = await page.$eval('#jobs-table thead th', (th) => th.getAttribute('scope'));
    check(headerScope === 'col', 'job list: header cells have scope=col');
    // The list follows the running job: its progress bar changes without a reload.
    const listFraction = async () => page.$eval(`#jobs-table tr[data-key="${RUNNING}"] [role=progressbar]`,
      (b) => Number(b.dataset.fraction)).catch(() => 1);
    const f0 = await listFraction();
    const listLive = await page.waitForFunction((id, f) => {
      const b = document.querySelector(`#jobs-table tr[data-key="${id}"] [role=progressbar]`);
      return !b || Number(b.dataset.fraction) > f;
    }, {timeout: 60000, polling: 250}, RUNNING, f0).then(() => true, () => false);
    check(listLive, `job list: job ${RUNNING}'s progress advances without a reload (from ${f0})`);
    await checkAccessible(page, 'job list');
    await shot(page, 'jobs');

    const filtered = async (query) => {
      await page.goto(`${BASE}/#/jobs?${query}`, {waitUntil: 'load'});
      await page.waitForSelector('#jobs-table');
      await page.waitForFunction(() => document.querySelector('#jobs-table caption'));
      return page.$$eval('#jobs-table tbody tr', (rows) => rows.map((r) => r.dataset.key).sort());
    };
    let keys = await filtered('state=RUNNING');
    check(JSON.stringify(keys) === JSON.stringify([RUNNING]), 'job list: state filter RUNNING', JSON.stringify(keys));
    keys = await filtered('label=small');
    check(JSON.stringify(keys) === JSON.stringify([FINISHED]), 'job list: label filter', JSON.stringify(keys));
    keys = await filtered('model=fg-wide');
    check(JSON.stringify(keys) === JSON.stringify([RUNNING]), 'job list: model filter', JSON.stringify(keys));
    keys = await filtered('state=SUCCEEDED&model=fg-a');
    check(JSON.stringify(keys) === JSON.stringify([FINISHED]), 'job list: state and model filters together', JSON.stringify(keys));

    // ------------------------------------------------------ finished job
    await page.goto(`${BASE}/#/job/${FINISHED}`, {waitUntil: 'load'});
    await page.waitForSelector('#table-penalty', {timeout: 30000});
    check(await page.$eval('h1', (h) => h.dataset.state) === 'SUCCEEDED', `job ${FINISHED}: page says SUCCEEDED`);
    const cells = await page.$$eval('#report td[data-metric]', (tds) => tds.map((td) => Object.assign({text: td.textContent}, td.dataset)));
    const sites = await page.$$eval('#report td[data-site]', (tds) => tds.map((td) => Object.assign({}, td.dataset)));
    const mismatches = [];
    let compared = 0;
    const compareRow = (model, row) => {
      const cell = cells.find((c) => c.model === model && c.intervention === row.intervention && c.metric === row.metric && !c.across);
      if (!cell) return mismatches.push(`${model} ${row.intervention}/${row.metric}: not on the page`);
      compared++;
      if (row.value === null || row.value === undefined) {
        if (cell.text !== 'undefined') mismatches.push(`${model} ${row.metric}: shows ${cell.text}, report says undefined`);
        return undefined;
      }
      const scale = Number(cell.scale || 1);
      const want = [row.value];
      if (row.ci_low !== undefined && row.ci_high !== undefined) want.push(row.ci_low, row.ci_high);
      if (!close(Number(cell.value), row.value)) mismatches.push(`${model} ${row.intervention}/${row.metric}: data-value ${cell.value} != ${row.value}`);
      if (want.length === 3 && (!close(Number(cell.ciLow), row.ci_low) || !close(Number(cell.ciHigh), row.ci_high))) {
        mismatches.push(`${model} ${row.intervention}/${row.metric}: CI ${cell.ciLow}, ${cell.ciHigh} != ${row.ci_low}, ${row.ci_high}`);
      }
      const shown = shownNumbers(cell.text);
      if (shown.length !== want.length) return mismatches.push(`${model} ${row.metric}: shows "${cell.text}", wants ${want.length} numbers`);
      want.forEach((w, k) => {
        if (Math.abs(shown[k].value - w * scale) > shown[k].tol) {
          mismatches.push(`${model} ${row.intervention}/${row.metric}: shows "${cell.text}", report says ${w}`);
        }
      });
      return undefined;
    };
    for (const m of REPORT.models) {
      for (const row of m.results) compareRow(m.model, row);
      for (const s of m.sites || []) {
        const cell = sites.find((c) => c.model === m.model && c.site === s.site);
        compared++;
        if (!cell || !close(Number(cell.mean), s.mean)) mismatches.push(`${m.model} site ${s.site}: ${cell && cell.mean} != ${s.mean}`);
      }
    }
    if (REPORT.dense_twin_execution) {
      for (const row of REPORT.dense_twin_execution.results) compareRow(REPORT.dense_twin_execution.model, row);
    }
    for (const a of REPORT.across_models || []) {
      const cell = cells.find((c) => c.across && c.intervention === a.intervention && c.metric === a.metric);
      compared++;
      if (!cell) { mismatches.push(`across ${a.intervention}/${a.metric}: not on the page`); continue; }
      if (a.mean === null) { if (cell.text !== 'undefined') mismatches.push(`across ${a.metric}: ${cell.text}`); continue; }
      if (!close(Number(cell.mean), a.mean) || !close(Number(cell.sd), a.sd) || Number(cell.n) !== a.n_models) {
        mismatches.push(`across ${a.intervention}/${a.metric}: ${cell.mean} ± ${cell.sd} (n ${cell.n}) != ${a.mean} ± ${a.sd} (n ${a.n_models})`);
      }
      const shown = shownNumbers(cell.text);
      const scale = Number(cell.scale || 1);
      if (shown.length < 4 || Math.abs(shown[0].value - a.mean * scale) > shown[0].tol || Math.abs(shown[1].value - a.sd * scale) > shown[1].tol) {
        mismatches.push(`across ${a.intervention}/${a.metric}: shows "${cell.text}", report says ${a.mean} ± ${a.sd}`);
      }
    }
    check(compared > 50 && mismatches.length === 0,
      `job ${FINISHED}: the page shows the numbers of fca report --save_json (${compared} compared)`, mismatches.slice(0, 20).join('\n'));
    // Charts: a penalty bar per model and intervention; per-layer plots
    // whose series differ in marker shape, not colour alone.
    const bars = await page.$$eval('#penalty-chart rect[data-series]', (r) => r.length);
    const wantBars = REPORT.models.reduce((n, m) => n + m.results.filter((r) => r.metric === 'penalty' && r.value !== null).length, 0);
    check(bars === wantBars, `job ${FINISHED}: penalty chart has a bar per model and intervention (${bars}/${wantBars})`);
    const shapes = await page.$$eval('#report svg.chart [data-series]', (els) => {
      const by = {};
      for (const e of els) if (e.tagName !== 'rect' || e.closest('#penalty-chart') === null) (by[e.dataset.series] = by[e.dataset.series] || new Set()).add(e.tagName);
      return Object.fromEntries(Object.entries(by).map(([k, v]) => [k, [...v].join(',')]));
    });
    check(Object.keys(shapes).length >= 2 && new Set(Object.values(shapes)).size === Object.keys(shapes).length,
      `job ${FINISHED}: per-layer plots tell models apart by marker shape`, JSON.stringify(shapes));
    const legend = await page.$$eval('#report ul.legend li', (lis) => lis.map((li) => li.textContent));
    check(REPORT.models.every((m) => legend.some((t) => t.includes(m.model))), `job ${FINISHED}: charts have legends naming the models`, JSON.stringify(legend));
    await checkAccessible(page, `job ${FINISHED}`);
    await shot(page, `job-${FINISHED}`);

    // ------------------------------------------------------- running job
    await page.goto(`${BASE}/#/job/${RUNNING}`, {waitUntil: 'load'});
    await page.waitForSelector('#job-progress', {timeout: 30000});
    const first = await page.$eval('#job-progress', (b) => Number(b.dataset.fraction));
    const advanced = await page.waitForFunction((f) => {
      const b = document.querySelector('#job-progress');
      return b && Number(b.dataset.fraction) > f + 0.001;
    }, {timeout: 90000, polling: 200}, first).then(() => true, () => false);
    const last = await page.$eval('#job-progress', (b) => Number(b.dataset.fraction));
    check(advanced, `job ${RUNNING}: progress advances live (${first} -> ${last})`);
    check(requests.some((u) => u.includes(`/api/v1/jobs/${RUNNING}/events`)), `job ${RUNNING}: progress comes over the events stream (SSE)`);
    const text = await page.$eval('#job-progress-text', (e) => e.textContent);
    check(/%/.test(text) && /fg-wide|live|calibration|replay|timing|windowing|waiting/.test(text), `job ${RUNNING}: progress text names the phase`, text);
    await shot(page, `job-${RUNNING}`);

    // ------------------------------------------------------------ compare
    await page.goto(`${BASE}/#/compare?jobs=${FINISHED},${RUNNING}`, {waitUntil: 'load'});
    await page.waitForSelector('#compare-penalty-chart', {timeout: 30000});
    const jobsCompared = await page.$$eval('#compare-jobs-table tbody tr', (rows) => rows.map((r) => r.dataset.key));
    check(jobsCompared.includes(FINISHED) && jobsCompared.includes(RUNNING), 'compare: both jobs listed', JSON.stringify(jobsCompared));
    const models = REPORT.models.map((m) => m.model);
    const seriesKeys = await page.$$eval('#compare-penalty tbody tr', (rows) => rows.map((r) => r.dataset.key));
    check(models.every((m) => seriesKeys.includes(`${FINISHED}/${m}`)), `compare: the penalty table shows ${models.join(' and ')}`, JSON.stringify(seriesKeys));
    const legendC = await page.$$eval('#compare-penalty-chart ul.legend li', (lis) => lis.map((li) => li.textContent));
    check(models.every((m) => legendC.some((t) => t.includes(m))), 'compare: the penalty chart shows both models', JSON.stringify(legendC));
    const cmpCells = await page.$$eval('#compare-penalty td[data-metric], #compare-retention td[data-metric], #compare-eta2 td[data-metric]',
      (tds) => tds.map((td) => Object.assign({text: td.textContent}, td.dataset)));
    const cmpBad = [];
    let cmpN = 0;
    for (const m of REPORT.models) {
      for (const row of m.results.filter((r) => r.metric === 'penalty' || r.metric === 'retention_pct' || r.metric.startsWith('eta2.'))) {
        const cell = cmpCells.find((c) => c.job === FINISHED && c.model === m.model && c.intervention === row.intervention && c.metric === row.metric);
        cmpN++;
        if (!cell || (row.value === null ? cell.text !== 'undefined' : !close(Number(cell.value), row.value))) {
          cmpBad.push(`${m.model} ${row.intervention}/${row.metric}: ${cell ? cell.value : 'missing'} != ${row.value}`);
        }
      }
    }
    check(cmpN > 0 && cmpBad.length === 0, `compare: penalties, retention and eta2 of job ${FINISHED} match the report (${cmpN})`, cmpBad.join('\n'));
    const cmpBars = await page.$$eval('#compare-penalty-chart rect[data-series]', (r) => r.length);
    check(cmpBars >= models.length, `compare: penalty bars drawn (${cmpBars})`);
    await checkAccessible(page, 'compare');
    await shot(page, 'compare');

    await page.goto(`${BASE}/#/compare?models=${models.join(',')}`, {waitUntil: 'load'});
    await page.waitForSelector('#compare-penalty tbody tr', {timeout: 30000});
    const byModel = await page.$$eval('#compare-penalty tbody tr', (rows) => rows.map((r) => r.dataset.key));
    check(models.every((m) => byModel.includes(`${FINISHED}/${m}`)), 'compare by models: each model\'s latest finished job', JSON.stringify(byModel));
    await shot(page, 'compare-models');

    // -------------------------------------------------------------- model
    await page.goto(`${BASE}/#/model/${models[0]}`, {waitUntil: 'load'});
    await page.waitForSelector('#model-jobs-table', {timeout: 30000});
    const modelJobs = await page.$$eval('#model-jobs-table tbody tr', (rows) => rows.map((r) => r.dataset.key));
    check(modelJobs.includes(FINISHED) && !modelJobs.includes(RUNNING), `model ${models[0]}: lists job ${FINISHED} only`, JSON.stringify(modelJobs));
    await checkAccessible(page, `model ${models[0]}`);
    await shot(page, 'model');
    await page.goto(`${BASE}/#/model/fg-wide`, {waitUntil: 'load'});
    await page.waitForSelector('#model-jobs-table', {timeout: 30000});
    const wideJobs = await page.$$eval('#model-jobs-table tbody tr', (rows) => rows.map((r) => r.dataset.key));
    check(JSON.stringify(wideJobs) === JSON.stringify([RUNNING]), `model fg-wide: lists job ${RUNNING}`, JSON.stringify(wideJobs));

    await page.goto(`${BASE}/#/models`, {waitUntil: 'load'});
    await page.waitForSelector('#models-table', {timeout: 30000});
    const modelRows = await page.$$eval('#models-table tbody tr', (rows) => rows.length);
    check(modelRows >= 4, `models page lists the server's models (${modelRows})`);
    await shot(page, 'models');
  } finally {
    await browser.close();
    fs.rmSync(profile, {recursive: true, force: true});
  }
  check(consoleErrors.length === 0, 'no console errors', consoleErrors.join('\n'));
  check(foreign.length === 0 && requests.length > 0, `no request leaves the server (${requests.length} requests, all to ${HOST})`, foreign.join('\n'));
}

main().catch((err) => {
  check(false, 'the test ran to its end', err && err.stack);
}).finally(() => {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
});
