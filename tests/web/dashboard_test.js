// Long file: one browser session walks every page of the dashboard in order.
// The web dashboard in a real browser: Debian's chromium, headless, driven by
// puppeteer-core, against a server whose HTTP address is given (the real
// fca-server with its gateway; tests/web/run_dashboard_test.sh starts it
// with a finished job 1 (fg-a and fg-b, per-layer dependence of
// static_layer), a finished job 2 (fg-a again) and a running job 3).
//
//   node dashboard_test.js --url=http://127.0.0.1:PORT --report_json=FILE
//       --cli_verdicts=FILE --out=DIR [--api_key=KEY] [--finished=1]
//       [--again=2] [--again_model=fg-a] [--running=3]
//       [--chromium=/usr/bin/chromium] [--reader_key=KEY --lab_job=N]
//       [--routing_job=N [--pool_jobs=A,B]] [--report_html=FILE]
//
// Checks: before signing in, and on errors, the page speaks in sentences,
// not status codes; the job list shows the jobs with their live state (and
// its filters work); the finished job's page shows the numbers of
// `fca report --save_json` (FILE), the slowdown verdicts in the words of
// `fca results` (--cli_verdicts: its table for metric slowdown_verdict), and
// the per-layer dependence as a chart and a table; the running job's
// progress advances live over server-sent events; the comparison view
// shows both models, and by model names the job it took for each and lets
// another be picked; model pages list their jobs; tables have captions and
// header scopes; at 1280 and 390 px wide nothing reaches past the page's
// edge but inside the tables' and charts' scroll boxes, and chart text is
// at least 11 px as drawn; no console errors; no request leaves the
// server. With --reader_key (bob, a reader in project `lab`) and
// --lab_job (alice's job there, queued behind the running job): bob signs
// in, picks `lab` in the project selector and sees alice's job with its
// owner and project; the queue panel counts lab's job by name and the
// running job of another project only as "other projects", never naming
// its owner; bob's cancel of alice's job is refused in words; once the
// running job is cancelled (with the first key), alice's job ends and bob
// opens its report. With --routing_job (a finished audit of a mixture of
// experts) only: after signing in, its page's Routing section (see
// routingReport in routing_report.js), and with --pool_jobs (fg-a and fg-b
// audited alike, one job each) the compare page pooling them (pooledCompare).
// The first screens at 1280x800 and 390x844, and the saved report
// (--report_html: `fca report --save_html` of job 1): first_screen.js. Writes
// one PNG per page into DIR. The last line is "N passed, M failed".
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');
const firstScreen = require('./first_screen');
const {routingReport} = require('./routing_report');

const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const m = /^--([^=]+)(?:=(.*))?$/.exec(a);
  if (!m) throw new Error(`bad argument ${a}`);
  return [m[1], m[2] ?? 'true'];
}));
for (const required of ['url', 'report_json', 'cli_verdicts', 'out']) {
  if (!args[required]) {
    console.error(`usage: node dashboard_test.js --url=http://HOST:PORT --report_json=FILE --cli_verdicts=FILE --out=DIR`);
    process.exit(2);
  }
}
const BASE = args.url.replace(/\/$/, '');
const HOST = new URL(BASE).host;
const FINISHED = String(args.finished || '1');
const AGAIN = String(args.again || '2');
const AGAIN_MODEL = String(args.again_model || 'fg-a');
const RUNNING = String(args.running || '3');
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
// `fca results --job=1 --metric=slowdown_verdict` (a table: JOB MODEL
// INTERVENTION METRIC VALUE CI N, columns two or more spaces apart): the
// CLI's verdict word per model.
const CLI_VERDICTS = Object.fromEntries(fs.readFileSync(args.cli_verdicts, 'utf8').split('\n').slice(1)
  .map((l) => l.trim().split(/\s{2,}/)).filter((c) => c.length >= 5 && c[3] === 'slowdown_verdict').map((c) => [c[1], c[4]]));
// The status codes' names (and the CLI's key hints), which the page should
// never show a user.
const CODES = ['UNAUTHENTICATED', 'PERMISSION_DENIED', 'NOT_FOUND', 'INVALID_ARGUMENT', 'FAILED_PRECONDITION',
  'RESOURCE_EXHAUSTED', 'UNAVAILABLE', 'INTERNAL', 'UNIMPLEMENTED', 'HTTP 4', 'HTTP 5', 'FCA_TOKEN', '--token', 'metadata'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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
  for (const width of [390, 1280]) await checkLayout(page, name, width);
  await page.setViewport(size);
}

// At `width` px: no element outside the designated scroll boxes
// (.table-wrap, .chart-wrap) reaches past the page's edges or is wider than
// the page, the boxes themselves scroll (overflow-x auto) rather than clip,
// and every chart's text is at least 11 px tall as drawn (its CSS font size
// times the SVG's scale on screen) and lies inside its chart. A screenshot
// of each width.
async function checkLayout(page, name, width) {
  await page.setViewport({width, height: 900});
  await sleep(300);
  const r = await page.evaluate(() => {
    const BOXES = '.table-wrap, .chart-wrap';
    const vw = document.documentElement.clientWidth;
    const what = (e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}${typeof e.className === 'string' && e.className ? '.' + e.className.split(' ').join('.') : ''}`;
    const out = [];
    let boxes = 0;
    for (const e of document.body.querySelectorAll('*')) {
      const box = e.matches(BOXES);
      if (!box && e.parentElement.closest(BOXES)) continue;
      if (e.matches('.skip')) continue;  // off screen until focused
      const cs = getComputedStyle(e);
      if (cs.display === 'none') continue;
      const rect = e.getBoundingClientRect();
      if (rect.width === 0 && rect.height === 0) continue;  // not rendered (closed details, hidden)
      if (rect.left < -0.5 || rect.right > vw + 0.5) out.push(`${what(e)} spans ${Math.round(rect.left)}..${Math.round(rect.right)} px of ${vw}`);
      // A select's closed text may be cut at its box (max-width: its list
      // shows each option whole); the box itself is checked above. With
      // wide fonts (a fresh Debian 12 has DejaVu only) the compare page's
      // job pickers are such selects.
      if (!box && e.tagName !== 'SELECT' && e.scrollWidth > vw) out.push(`${what(e)} is ${e.scrollWidth} px wide, the page ${vw}`);
      if (box) {
        boxes++;
        if (cs.overflowX !== 'auto' && cs.overflowX !== 'scroll') out.push(`${what(e)} clips (overflow-x ${cs.overflowX})`);
      }
    }
    if (document.documentElement.scrollWidth > vw) out.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
    const small = [];
    let texts = 0;
    for (const t of document.querySelectorAll('svg.chart text')) {
      const m = t.getScreenCTM();
      if (!m || !t.getBoundingClientRect().width) continue;
      texts++;
      const px = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
      if (px < 11 - 1e-6) small.push(`"${t.textContent}" ${px.toFixed(1)} px`);
      // Drawn inside its SVG (an SVG clips what lies outside it); the
      // rotated axis titles are measured before rotation, so left out.
      const svg = t.ownerSVGElement;
      const b = t.getBBox();
      if (!t.getAttribute('transform') && (b.x < -0.5 || b.x + b.width > svg.viewBox.baseVal.width + 0.5)) {
        small.push(`"${t.textContent}" spans ${b.x.toFixed(0)}..${(b.x + b.width).toFixed(0)} of its chart's ${svg.viewBox.baseVal.width}`);
      }
    }
    return {out, boxes, texts, small};
  });
  check(r.out.length === 0, `${name} at ${width} px: nothing reaches past the page but inside its ${r.boxes} scroll boxes`, r.out.slice(0, 10).join('\n'));
  check(r.small.length === 0, `${name} at ${width} px: chart text at least 11 px as drawn and inside its chart (${r.texts} texts)`, r.small.slice(0, 10).join('\n'));
  await shot(page, `${name.replace(/[^a-z0-9]+/gi, '-')}-${width}`);
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
    const ctx = {page, browser, check, OUT, BASE, REPORT, CLI_VERDICTS, FINISHED, RUNNING, shownNumbers, close};
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
      // Words, not status codes, before signing in.
      const before = await page.evaluate(() => document.body.innerText);
      check(before.includes('Sign in with your API key') && !CODES.some((c) => before.includes(c)),
        'sign in: the page says "Sign in with your API key", no status codes', before);
      await page.type('#api-key', args.api_key);
      await page.click('#login button[type=submit]');
      await page.waitForSelector('#signed-in:not([hidden])', {timeout: 30000});
      const stored = await page.evaluate(() => sessionStorage.getItem('fca.apiKey'));
      check(stored === args.api_key, 'sign in: the key is kept in sessionStorage');
      consoleErrors.length = 0;
    } else {
      check(await page.$('#login[hidden]') !== null, 'no API keys: no login box');
    }
    if (args.routing_job) {
      await routingReport(page, {BASE, args, callApi, check, shownNumbers, checkAccessible, shot});
      if (args.pool_jobs) await pooledCompare(page);
      return;
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
    await firstScreen.home(ctx);

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
    keys = await filtered(`state=SUCCEEDED&model=${AGAIN_MODEL}`);
    check(JSON.stringify(keys) === JSON.stringify([FINISHED, AGAIN].sort()), 'job list: state and model filters together', JSON.stringify(keys));

    // An error in words: a job that does not exist.
    await page.goto(`${BASE}/#/job/987654321`, {waitUntil: 'load'});
    await page.waitForSelector('#main .error', {timeout: 30000});
    const notFound = await page.$eval('#main .error', (e) => e.textContent);
    check(/^Not found\./.test(notFound) && !CODES.some((c) => notFound.includes(c)), 'errors: a missing job reads "Not found.", no status code', notFound);
    // The browser logs the refused GetJob's 404; that one is expected.
    for (let k = consoleErrors.length - 1; k >= 0; k--) {
      if (/status of 404/.test(consoleErrors[k]) && /\/api\/v1\/GetJob/.test(consoleErrors[k])) consoleErrors.splice(k, 1);
    }

    // ------------------------------------------------------ finished job
    await page.goto(`${BASE}/#/job/${FINISHED}`, {waitUntil: 'load'});
    await page.waitForSelector('#table-penalty', {timeout: 30000});
    check(await page.$eval('h1', (h) => h.dataset.state) === 'SUCCEEDED', `job ${FINISHED}: page says SUCCEEDED`);
    const cells = await page.$$eval('#report td[data-metric]', (tds) => tds.map((td) => Object.assign({text: td.textContent}, td.dataset)));
    const sites = await page.$$eval('#report td[data-site]', (tds) => tds.map((td) => Object.assign({}, td.dataset)));
    const mismatches = [];
    let compared = 0;
    let verdicts = 0;
    const compareRow = (model, row) => {
      const cell = cells.find((c) => c.model === model && c.intervention === row.intervention && c.metric === row.metric && !c.across);
      if (!cell) return mismatches.push(`${model} ${row.intervention}/${row.metric}: not on the page`);
      compared++;
      if (row.value === null || row.value === undefined) {
        if (cell.text !== 'undefined') mismatches.push(`${model} ${row.metric}: shows ${cell.text}, report says undefined`);
        return undefined;
      }
      if (cell.words) {
        // A verdict: the CLI's word, and the word of the stored value.
        const word = row.value > 0 ? 'slower' : row.value < 0 ? 'faster' : 'no detectable difference';
        verdicts++;
        if (cell.text !== CLI_VERDICTS[model] || cell.text !== word || !close(Number(cell.value), row.value)) {
          mismatches.push(`${model} ${row.metric}: shows "${cell.text}", fca results says "${CLI_VERDICTS[model]}", value ${row.value}`);
        }
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
      if (cell.words) {
        // "1 slower, 1 no detectable difference": the models' words counted.
        const counts = {};
        for (const m of REPORT.models) {
          const r = m.results.find((x) => x.intervention === a.intervention && x.metric === a.metric);
          if (r && r.value !== null) counts[CLI_VERDICTS[m.model]] = (counts[CLI_VERDICTS[m.model]] || 0) + 1;
        }
        const want = Object.entries(counts).map(([w, n]) => `${n} ${w}`).sort().join(', ');
        if (cell.text.split(', ').sort().join(', ') !== want) mismatches.push(`across ${a.metric}: shows "${cell.text}", want "${want}"`);
        continue;
      }
      if (a.mean === null) { if (cell.text !== 'undefined') mismatches.push(`across ${a.metric}: ${cell.text}`); continue; }
      if (!close(Number(cell.mean), a.mean) || !close(Number(cell.sd), a.sd) || Number(cell.n) !== a.n_models) {
        mismatches.push(`across ${a.intervention}/${a.metric}: ${cell.mean} ± ${cell.sd} (n ${cell.n}) != ${a.mean} ± ${a.sd} (n ${a.n_models})`);
      }
      const shown = shownNumbers(cell.text);
      const scale = Number(cell.scale || 1);
      // One model's value has no spread: the mean alone, no "± 0".
      if (a.n_models === 1) {
        if (shown.length !== 1 || Math.abs(shown[0].value - a.mean * scale) > shown[0].tol) mismatches.push(`across ${a.metric} of one model: shows "${cell.text}"`);
        continue;
      }
      if (shown.length < 4 || Math.abs(shown[0].value - a.mean * scale) > shown[0].tol || Math.abs(shown[1].value - a.sd * scale) > shown[1].tol) {
        mismatches.push(`across ${a.intervention}/${a.metric}: shows "${cell.text}", report says ${a.mean} ± ${a.sd}`);
      }
    }
    check(compared > 50 && mismatches.length === 0,
      `job ${FINISHED}: the page shows the numbers of fca report --save_json (${compared} compared)`, mismatches.slice(0, 20).join('\n'));
    const verdictLine = await page.$$eval('#verdicts strong', (s) => s.map((e) => [e.dataset.model, e.textContent]));
    check(verdicts === REPORT.models.length && Object.keys(CLI_VERDICTS).length === REPORT.models.length &&
      verdictLine.length === REPORT.models.length && verdictLine.every(([m, w]) => CLI_VERDICTS[m] === w),
    `job ${FINISHED}: slowdown verdicts in the words of fca results (${JSON.stringify(CLI_VERDICTS)})`, JSON.stringify(verdictLine));
    // The execution section says one thing: the twin has no latency of its
    // own (each model's column has the twin's from its own pairs), and the
    // legend states the two-block rule the verdict applies.
    const latencyRow = await page.$$eval('#table-execution tr[data-key="execution/latency_us_per_token"] td', (tds) => tds.map((td) => td.textContent));
    const twinLatency = await page.$$eval('#table-execution tr[data-key="execution/dense_latency_us_per_token"] td[data-model]', (tds) => tds.length);
    check(latencyRow.length === REPORT.models.length + 2 && latencyRow[latencyRow.length - 1] === '–' && twinLatency === REPORT.models.length,
      `job ${FINISHED}: the dense twin has no latency of its own; each model shows its twin's from its own pairs`, JSON.stringify(latencyRow));
    const executionNote = await page.$eval('#table-execution', (t) => t.closest('section').querySelector('p.note').textContent);
    check(/each of the two timing blocks' own CIs/.test(executionNote) && /pooled/.test(executionNote) && !/excludes 0/.test(executionNote),
      `job ${FINISHED}: the execution legend states the two-block rule`, executionNote);

    // Per-layer dependence (static_layer at one layer at a time): a bar and
    // a table row per layer with the report's penalty, each layer's share of
    // the whole-model penalty where that penalty's CI lies above 0, and the
    // headline naming the layer with the largest share.
    const layerRows = (m) => m.results.filter((r) => r.intervention === 'static_layer' && /^layer_penalty\.\d+$/.test(r.metric));
    const layers = [...new Set(REPORT.models.flatMap((m) => layerRows(m).map((r) => r.metric)))];
    const perLayer = await page.evaluate(() => {
      const t = document.querySelector('#per-layer-static_layer-table');
      return t && {
        rows: [...t.querySelectorAll('tbody tr')].map((tr) => tr.dataset.key),
        shares: [...t.querySelectorAll('td[data-group-metric]')].map((td) => [td.dataset.model, td.dataset.groupMetric, td.dataset.share, td.textContent]),
        bars: [...document.querySelectorAll('#per-layer-static_layer-chart rect[data-series]')].map((r) => [r.dataset.series, r.dataset.group, Number(r.dataset.value)]),
        headline: [...document.querySelectorAll('#per-layer-static_layer-headline li')].map((li) => [li.dataset.model, li.dataset.group, li.textContent]),
      };
    });
    const layerBad = [];
    if (!perLayer) layerBad.push('no #per-layer-static_layer-table');
    else {
      for (const l of layers) if (!perLayer.rows.includes(l)) layerBad.push(`no table row ${l}`);
      REPORT.models.forEach((m, k) => {
        // The share is defined where the block CI (penalty_block) lies above 0.
        const whole = m.results.find((r) => r.intervention === 'static_layer' && r.metric === 'penalty');
        const block = m.results.find((r) => r.intervention === 'static_layer' && r.metric === 'penalty_block');
        const ok = whole && whole.value !== null && block && block.ci_low > 0;
        let best = null;
        for (const r of layerRows(m)) {
          const group = r.metric.replace('layer_penalty.', 'layer ');
          const bar = perLayer.bars.find(([s, g]) => Number(s) === k && g === group);
          if (r.value !== null && (!bar || !close(bar[2], r.value))) layerBad.push(`${m.model} ${r.metric}: bar ${bar && bar[2]} != ${r.value}`);
          const cell = perLayer.shares.find(([mm, metric]) => mm === m.model && metric === r.metric);
          const want = ok && r.value !== null ? r.value / whole.value : null;
          if (!cell) { layerBad.push(`${m.model} ${r.metric}: no share cell`); continue; }
          if (want === null ? cell[2] != null || cell[3] !== '–' : Math.abs(Number(cell[2]) - want) > 1e-9 * Math.max(1, Math.abs(want)) ||
              Math.abs(parseFloat(cell[3]) - 100 * want) > 0.05 + 1e-9) {
            layerBad.push(`${m.model} ${r.metric}: share ${cell[2]} "${cell[3]}" != ${want}`);
          }
          if (want !== null && (!best || want > best[1])) best = [r.metric.split('.')[1], want];
        }
        const line = perLayer.headline.find(([mm]) => mm === m.model);
        if (best && (!line || line[1] !== best[0] || !line[2].includes(`layer ${best[0]} carries ${(100 * best[1]).toFixed(0)}%`))) {
          layerBad.push(`${m.model}: headline ${JSON.stringify(line)}, want layer ${best[0]} at ${(100 * best[1]).toFixed(0)}%`);
        }
      });
    }
    check(layers.length >= 2 && layerBad.length === 0,
      `job ${FINISHED}: per-layer dependence of static_layer as a chart and a table (${layers.length} layers)`, layerBad.slice(0, 20).join('\n'));
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
    await firstScreen.finishedJob(ctx);
    if (args.report_html) await firstScreen.savedReport(ctx, args.report_html);

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
    await firstScreen.runningJob(ctx);

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

    // Pooled (PoolJobs): jobs FINISHED and AGAIN ran with other seeds and
    // settings, so the page shows the server's refusal naming each differing
    // field with each job's value, and still the side-by-side tables.
    await page.goto(`${BASE}/#/compare?jobs=${FINISHED},${AGAIN}&pool=1`, {waitUntil: 'load'});
    await page.waitForSelector('#compare-penalty-chart', {timeout: 30000});
    const refusal = await page.$eval('#compare-pool-section', (s) => ({text: s.innerText, code: (s.querySelector('.error') || {}).dataset}));
    check(refusal.text.includes(`seed (job ${FINISHED}: `) && refusal.text.includes(`; job ${AGAIN}: `),
      'compare: pooling jobs that disagree shows which fields differ, each job\'s value', refusal.text);
    check(await page.$eval('#compare-pool', (b) => b.checked), 'compare: the pool box is ticked when pooling');
    // The browser logs the refused PoolJobs' 409; that one is expected.
    for (let k = consoleErrors.length - 1; k >= 0; k--) {
      if (/status of 409/.test(consoleErrors[k]) && /\/api\/v1\/PoolJobs/.test(consoleErrors[k])) consoleErrors.splice(k, 1);
    }

    // By model: the newest finished job of each (AGAIN for AGAIN_MODEL, the
    // finished job for the other), named on the page; picking the older job
    // for AGAIN_MODEL compares that one.
    const byModels = async () => {
      await page.waitForSelector('#compare-penalty tbody tr', {timeout: 30000});
      return page.evaluate(() => ({
        rows: [...document.querySelectorAll('#compare-penalty tbody tr')].map((r) => r.dataset.key),
        picked: Object.fromEntries([...document.querySelectorAll('#compare-picked li')].map((li) => [li.dataset.model, li.dataset.job])),
        text: document.querySelector('#compare-picked').innerText,
      }));
    };
    await page.goto(`${BASE}/#/compare?models=${models.join(',')}`, {waitUntil: 'load'});
    let byModel = await byModels();
    const newest = Object.fromEntries(models.map((m) => [m, m === AGAIN_MODEL ? AGAIN : FINISHED]));
    check(models.every((m) => byModel.picked[m] === newest[m] && byModel.rows.includes(`${newest[m]}/${m}`) &&
      byModel.text.includes(`${m}: job ${newest[m]}`)) && byModel.rows.length === models.length,
    'compare by models: each model\'s newest finished job, named on the page', JSON.stringify(byModel));
    await checkAccessible(page, 'compare by models');
    await shot(page, 'compare-models');
    await page.select(`#compare-picked select[data-model="${AGAIN_MODEL}"]`, FINISHED);
    await page.waitForFunction((m, j) => {
      const li = document.querySelector(`#compare-picked li[data-model="${m}"]`);
      return li && li.dataset.job === j && document.querySelector('#compare-penalty tbody tr');
    }, {timeout: 30000}, AGAIN_MODEL, FINISHED);
    byModel = await byModels();
    const pickedCells = await page.$$eval('#compare-penalty td[data-metric]', (tds) => tds.map((td) => Object.assign({}, td.dataset)));
    const againRows = REPORT.models.find((m) => m.model === AGAIN_MODEL).results.filter((r) => r.metric === 'penalty');
    const pickedOk = againRows.every((r) => pickedCells.some((c) => c.job === FINISHED && c.model === AGAIN_MODEL &&
      c.intervention === r.intervention && (r.value === null ? c.defined === 'false' : close(Number(c.value), r.value))));
    check(byModel.rows.includes(`${FINISHED}/${AGAIN_MODEL}`) && !byModel.rows.includes(`${AGAIN}/${AGAIN_MODEL}`) && pickedOk &&
      byModel.text.includes(`${AGAIN_MODEL}: job ${FINISHED}`),
    `compare by models: picking job ${FINISHED} for ${AGAIN_MODEL} compares job ${FINISHED}'s rows`, JSON.stringify(byModel));

    // -------------------------------------------------------------- model
    await page.goto(`${BASE}/#/model/${models[0]}`, {waitUntil: 'load'});
    await page.waitForSelector('#model-jobs-table', {timeout: 30000});
    const modelJobs = await page.$$eval('#model-jobs-table tbody tr', (rows) => rows.map((r) => r.dataset.key));
    const wantJobs = (models[0] === AGAIN_MODEL ? [FINISHED, AGAIN] : [FINISHED]).sort();
    check(JSON.stringify(modelJobs.slice().sort()) === JSON.stringify(wantJobs), `model ${models[0]}: lists jobs ${wantJobs.join(', ')}`, JSON.stringify(modelJobs));
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
    const unavailable = await page.$$eval('#unavailable-models tbody tr', (rows) =>
      rows.map((r) => [r.querySelector('th').textContent, r.querySelector('td').textContent]));
    check(unavailable.length === 1 && unavailable[0][0] === 'fg-broken' &&
      unavailable[0][1].includes("model_type 'transformer-xl' is not supported"),
    'models page lists fg-broken as unavailable with its reason', JSON.stringify(unavailable));
    await shot(page, 'models');

    if (args.reader_key && args.lab_job) await readerInProject(page, consoleErrors);
  } finally {
    await browser.close();
    fs.rmSync(profile, {recursive: true, force: true});
  }
  check(consoleErrors.length === 0, 'no console errors', consoleErrors.join('\n'));
  check(foreign.length === 0 && requests.length > 0, `no request leaves the server (${requests.length} requests, all to ${HOST})`, foreign.join('\n'));
}

// An RPC over the gateway's JSON API, from the page (its origin) with `key`.
function callApi(page, rpc, body, key) {
  return page.evaluate(async (u, b, k) => {
    const res = await fetch(u, {method: 'POST', headers: {'Content-Type': 'application/json', Authorization: `Bearer ${k}`}, body: JSON.stringify(b)});
    return {status: res.status, body: await res.json()};
  }, `${BASE}/api/v1/${rpc}`, body, key);
}

// --pool_jobs A,B (fg-a in A, fg-b in B, audited alike): the compare page
// with "pool" shows which job each model came from and the pooled
// mean ± sd [min, max] row, the numbers PoolJobs gives over the API.
async function pooledCompare(page) {
  const ids = String(args.pool_jobs).split(',');
  const pooled = (await callApi(page, 'PoolJobs', {job_ids: ids}, args.api_key)).body;
  await page.goto(`${BASE}/#/compare?jobs=${ids.join(',')}&pool=1`, {waitUntil: 'load'});
  await page.waitForSelector('#compare-penalty-chart', {timeout: 30000});
  const sources = await page.$$eval('#compare-pool-models tbody tr', (rows) => rows.map((r) => r.dataset.key));
  check(JSON.stringify(sources) === JSON.stringify([`${ids[0]}/fg-a`, `${ids[1]}/fg-b`]),
    'pool: the page names the job each model came from', JSON.stringify(sources));
  const cells = await page.$$eval('#compare-penalty td[data-job="pooled"]', (tds) => tds.map((td) => Object.assign({}, td.dataset)));
  const bad = [];
  for (const m of (pooled.report || {}).metrics || []) {
    if (m.metric !== 'penalty') continue;
    const cell = cells.find((c) => c.intervention === m.intervention);
    if (!cell || !close(Number(cell.mean), m.across_models.mean) || !close(Number(cell.sd), m.across_models.sd) || cell.n !== String(m.across_models.n)) {
      bad.push(`${m.intervention}: ${JSON.stringify(cell)} != ${JSON.stringify(m.across_models)}`);
    }
  }
  check(cells.length > 0 && bad.length === 0, `pool: the pooled penalty row is PoolJobs' across both jobs (${cells.length})`, bad.join('\n'));
  await checkAccessible(page, 'pooled compare');
  await shot(page, 'compare-pooled');
}

// Bob, a reader in `lab`, on alice's job there (see the header).
// `consoleErrors`: main's; the refusals expected here are taken out.
async function readerInProject(page, consoleErrors) {
  const expected = (re) => {
    for (let k = consoleErrors.length - 1; k >= 0; k--) if (re.test(consoleErrors[k])) consoleErrors.splice(k, 1);
  };
  const LAB_JOB = String(args.lab_job);
  await page.goto(`${BASE}/#/jobs`, {waitUntil: 'load'});
  await page.waitForSelector('#sign-out', {timeout: 30000});
  await page.click('#sign-out');
  await page.waitForSelector('#login:not([hidden])', {timeout: 30000});
  await page.type('#api-key', args.reader_key);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('label.project-pick:not([hidden]) #project option[value="lab"]', {timeout: 30000});
  expected(/status of 401/);  // signed out, before bob's key
  const options = await page.$$eval('#project option', (os) => os.map((o) => o.value));
  check(JSON.stringify(options) === JSON.stringify(['', 'lab']), 'projects: bob picks from his personal project and lab', JSON.stringify(options));
  await page.select('#project', 'lab');
  await page.waitForSelector(`#jobs-table tr[data-key="${LAB_JOB}"]`, {timeout: 30000});
  const rows = await page.$$eval('#jobs-table tbody tr', (trs) => trs.map((tr) => ({key: tr.dataset.key,
    owner: tr.querySelector('td.owner').textContent, project: tr.querySelector('td.project').textContent})));
  check(rows.length === 1 && rows[0].owner === 'alice' && rows[0].project === 'lab',
    `projects: in lab bob sees alice's job ${LAB_JOB} with owner alice and project lab, and no other job`, JSON.stringify(rows));
  check(await page.evaluate(() => sessionStorage.getItem('fca.project')) === 'lab', 'projects: the choice is kept for the tab');

  // The queue: lab's queued job by name; the running job of the first
  // user's personal project only in the unnamed row.
  await page.waitForSelector('#queue-projects tr[data-key="lab"]', {timeout: 30000});
  const queue = await page.$$eval('#queue-projects tbody tr', (trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.key,
    Object.fromEntries([...tr.querySelectorAll('td[data-field]')].map((td) => [td.dataset.field, Number(td.textContent)]))])));
  const totals = await page.$eval('#queue-totals', (p) => p.textContent);
  check(queue.lab && queue.lab.queued_jobs === 1 && queue.lab.queued_tasks === 1 && queue.lab.running_jobs === 0,
    'queue: lab has one queued job of one task', JSON.stringify(queue));
  check(queue[''] && queue[''].running_jobs === 1 && queue[''].queued_jobs === 0, 'queue: one running job of other projects', JSON.stringify(queue));
  check(/^1 job queued, 1 running/.test(totals), 'queue: the totals count both', totals);
  const queueText = await page.$eval('#queue', (s) => s.innerText);
  check(queueText.includes('other projects') && !queueText.includes('tester'),
    'queue: the other project is not named, nor its owner', queueText);
  // Models: lab's waiting fg-a task; the other project's running fg-wide
  // task is not counted under its model (which is listed only as loaded).
  const models = await page.$$eval('#queue-models tbody tr', (trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.key,
    Object.assign(Object.fromEntries([...tr.querySelectorAll('td[data-field]')].map((td) => [td.dataset.field, Number(td.textContent)])),
      {cells: [...tr.querySelectorAll('td')].map((td) => td.textContent)})])));
  check(models['fg-a'] && models['fg-a'].queued_tasks === 1 && models['fg-a'].running_tasks === 0,
    'queue: fg-a has lab\'s one waiting task', JSON.stringify(models));
  check(!models['fg-wide'] || (models['fg-wide'].running_tasks === 0 && models['fg-wide'].cells[3] === ''),
    'queue: the other project\'s running task is counted under no model and no worker', JSON.stringify(models));
  check(await page.$('#queue-jobs') === null, 'queue: bob has no jobs of his own in it');
  await shot(page, 'reader-jobs');

  // Bob may see alice's queued job but not cancel it.
  await page.goto(`${BASE}/#/job/${LAB_JOB}`, {waitUntil: 'load'});
  await page.waitForFunction(() => [...document.querySelectorAll('#main button')].some((b) => b.textContent === 'Cancel job'),
    {timeout: 30000});
  page.once('dialog', (d) => d.accept());
  // The live panel re-renders every few seconds and may replace the error
  // before a poll sees it: record every error text #main shows from the click on.
  await page.evaluate(() => {
    window.shownErrors = [];
    const main = document.querySelector('#main');
    new MutationObserver(() => main.querySelectorAll('.error').forEach((e) => window.shownErrors.push(e.textContent)))
      .observe(main, {subtree: true, childList: true, characterData: true});
    [...main.querySelectorAll('button')].find((b) => b.textContent === 'Cancel job').click();
  });
  const refused = await (await page.waitForFunction(() => window.shownErrors.find((t) => t) || '',
    {timeout: 30000})).jsonValue();
  check(/^Your API key is not allowed to do this\./.test(refused), 'reader: cancelling alice\'s job is refused in words', refused);
  expected(/status of 403/);

  // The running job (the first key's) is cancelled; alice's job then runs.
  const api = (rpc, body, key) => callApi(page, rpc, body, key);
  const cancelled = await api('CancelJob', {job_id: RUNNING}, args.api_key);
  check(cancelled.status === 200, `job ${RUNNING} cancelled with its owner's key`, JSON.stringify(cancelled));
  let state = '';
  for (let i = 0; i < 600 && !/SUCCEEDED|FAILED|CANCELLED/.test(state); i++) {
    state = String(((await api('GetJob', {job_id: LAB_JOB}, args.reader_key)).body.job || {}).state);
    await sleep(500);
  }
  check(state === 'SUCCEEDED', `alice's job ${LAB_JOB} succeeded`, state);
  await page.goto(`${BASE}/#/jobs`, {waitUntil: 'load'});
  await page.goto(`${BASE}/#/job/${LAB_JOB}`, {waitUntil: 'load'});
  await page.waitForSelector('#table-penalty', {timeout: 60000});
  check(await page.$eval('h1', (h) => h.dataset.state) === 'SUCCEEDED', `reader: job ${LAB_JOB}'s page says SUCCEEDED`);
  const values = await page.$$eval('#report td[data-metric="nll"]', (tds) => tds.filter((td) => td.dataset.model === 'fg-a').length);
  check(values > 0, `reader: job ${LAB_JOB}'s report shows fg-a's results (${values} nll cells)`);
  check(!(await page.evaluate(() => [...document.querySelectorAll('#main button')].some((b) => b.textContent === 'Cancel job'))),
    'reader: a finished job offers no cancel');
  await shot(page, 'reader-report');
}

main().catch((err) => {
  check(false, 'the test ran to its end', err && err.stack);
}).finally(() => {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
});
