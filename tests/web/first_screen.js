// The dashboard's first screens (issue 39, "a dashboard that opens on
// results"), checked by dashboard_test.js in the same browser session: what
// a reader sees without scrolling at 1280x800 (a laptop) and 390x844 (a
// phone), and the saved HTML report (`fca report --save_html`) at 1280 and
// 800 px. Each function takes the test's context:
//   {page, browser, check, OUT, BASE, REPORT, CLI_VERDICTS, FINISHED,
//    RUNNING, shownNumbers, close}
// restores the page's viewport when done, and writes a screenshot of each
// first screen (the viewport only) into OUT.
'use strict';

const path = require('path');

const SCREENS = [{width: 1280, height: 800}, {width: 390, height: 844}];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function shot(page, out, name) {
  const file = path.join(out, `${name}.png`);
  await page.screenshot({path: file});
  console.log(`# screenshot ${file}`);
}

// Opens `hash` at `screen`, scrolled to the top, once `selector` is there.
async function open(page, base, hash, selector, screen) {
  await page.setViewport(screen);
  await page.goto(`${base}/${hash}`, {waitUntil: 'load'});
  await page.waitForSelector(selector, {timeout: 30000});
  await page.evaluate(() => window.scrollTo(0, 0));
  await sleep(300);
}

// Where each selector's element lies on the screen: {top, bottom, left,
// right} in px of the viewport, or null when absent or not rendered.
function boxes(page, selectors) {
  return page.evaluate((sels) => Object.fromEntries(sels.map((s) => {
    const e = document.querySelector(s);
    const r = e && e.getBoundingClientRect();
    return [s, r && r.height > 0 ? {top: r.top, bottom: r.bottom, left: r.left, right: r.right} : null];
  })), selectors);
}
const onScreen = (b, screen) => !!b && b.top >= 0 && b.bottom <= screen.height && b.left >= 0 && b.right <= screen.width;
const startsOnScreen = (b, screen) => !!b && b.top >= 0 && b.top < screen.height;

// The cells of #jobs-table that are cut off: a cell whose content is wider
// than the cell, or that reaches past its scroll box or the viewport, and
// whether the box itself scrolls (it must not at 1280 px).
function clippedJobCells(page) {
  return page.evaluate(() => {
    const t = document.querySelector('#jobs-table');
    const box = t.parentElement;
    const edge = Math.min(box.getBoundingClientRect().right, document.documentElement.clientWidth);
    const heads = [...t.querySelectorAll('thead th')].map((th) => th.textContent);
    const out = [];
    for (const tr of t.querySelectorAll('tr')) {
      [...tr.children].forEach((c, k) => {
        const r = c.getBoundingClientRect();
        if (c.scrollWidth > c.clientWidth + 0.5 || r.right > edge + 0.5) {
          out.push(`${heads[k]} of row ${tr.dataset.key || 'head'}: ${c.scrollWidth} px in ${c.clientWidth}, right ${Math.round(r.right)} of ${Math.round(edge)}`);
        }
      });
    }
    return {heads, out, scrolls: box.scrollWidth > box.clientWidth, width: [box.scrollWidth, box.clientWidth]};
  });
}

// The front page: the job list first (the queue below it), no column of
// the list clipped at 1280 px; the queue collapses and stays collapsed.
async function home(ctx) {
  const {page, check, OUT, BASE, FINISHED} = ctx;
  const before = page.viewport();
  for (const screen of SCREENS) {
    await open(page, BASE, '#/jobs', `#jobs-table tr[data-key="${FINISHED}"]`, screen);
    const at = `${screen.width}x${screen.height}`;
    const b = await boxes(page, ['#jobs-table', '#jobs-table tbody tr', '#queue']);
    check(startsOnScreen(b['#jobs-table'], screen) && b['#jobs-table tbody tr'].bottom <= screen.height &&
      b['#queue'] && b['#queue'].top >= b['#jobs-table'].bottom,
    `front page at ${at}: the job list and its first row are on the first screen, the queue below the list`, JSON.stringify(b));
    if (screen.width === 1280) {
      const c = await clippedJobCells(page);
      check(c.out.length === 0 && !c.scrolls && ['label', 'owner', 'created'].every((h) => c.heads.includes(h)),
        `front page at ${at}: no column of the job list is clipped (${c.heads.join(', ')}; ${c.width.join(' px in ')} px)`,
        c.out.slice(0, 10).join('\n'));
    }
    await shot(page, OUT, `first-jobs-${screen.width}`);
  }
  // The queue collapses to its summary (its totals), and stays so when the
  // page is opened again; opened again, it stays open.
  const state = () => page.evaluate(() => {
    const q = document.querySelector('#queue');
    return {tag: q.tagName, open: q.open, totals: document.querySelector('#queue summary #queue-totals') !== null,
      stored: localStorage.getItem('fca.queueOpen')};
  });
  // The page may render its panels again while the first data arrive (a
  // click on the replaced panel is lost): the totals' text first, and the
  // click again while the choice is not stored.
  const settled = () => page.waitForFunction(() => (document.querySelector('#queue-totals') || {}).textContent,
    {timeout: 30000});
  const toggle = async (to) => {
    await settled();
    for (let attempt = 0; attempt < 3; ++attempt) {
      await page.click('#queue > summary');
      const stored = await page.waitForFunction((v) => localStorage.getItem('fca.queueOpen') === v, {timeout: 3000}, to)
        .then(() => true, () => false);
      if (stored) break;
    }
    await page.reload({waitUntil: 'load'});
    await settled();
    return state();
  };
  if (!check(await page.$('#queue > summary') !== null, 'front page: the queue is a collapsible panel')) return page.setViewport(before);
  const closed = await toggle('closed');
  const reopened = await toggle('open');
  check(closed.tag === 'DETAILS' && closed.totals && !closed.open && closed.stored === 'closed' && reopened.open,
    'front page: the queue collapses to its totals, and is remembered collapsed or open', JSON.stringify([closed, reopened]));
  await page.setViewport(before);
}

// A finished job opens on its headline: the verdicts in the words of `fca
// results` and every intervention's penalty with its CI as `fca report
// --save_json` has it, on the first screen and above the settings, which
// collapse.
async function finishedJob(ctx) {
  const {page, check, OUT, BASE, REPORT, CLI_VERDICTS, FINISHED, shownNumbers, close} = ctx;
  const before = page.viewport();
  for (const screen of SCREENS) {
    await open(page, BASE, `#/job/${FINISHED}`, '#headline-penalties', screen);
    const at = `${screen.width}x${screen.height}`;
    const b = await boxes(page, ['#headline', '#headline-verdicts', '#headline-penalties', '#job-settings']);
    const laptop = screen.width === 1280;
    // A laptop shows the verdicts and the penalty table's first rows; a
    // phone at least the headline's start.
    check(startsOnScreen(b['#headline'], screen) && b['#job-settings'].top >= b['#headline'].bottom &&
      (!laptop || (onScreen(b['#headline-verdicts'], screen) && startsOnScreen(b['#headline-penalties'], screen))),
    `job ${FINISHED} at ${at}: opens on its headline, above the settings`, JSON.stringify(b));
    await shot(page, OUT, `first-job-${FINISHED}-${screen.width}`);
  }
  const settings = await page.$eval('#job-settings', (d) => ({tag: d.tagName, open: d.open, summary: d.querySelector('summary').textContent}));
  check(settings.tag === 'DETAILS' && !settings.open && /^Settings/.test(settings.summary),
    `job ${FINISHED}: the settings are collapsed below the headline`, JSON.stringify(settings));

  const words = await page.$$eval('#headline-verdicts strong', (s) => s.map((e) => [e.dataset.model, e.textContent]));
  check(words.length === REPORT.models.length && words.every(([m, w]) => CLI_VERDICTS[m] === w),
    `job ${FINISHED}: the headline's verdicts are fca results' words`, JSON.stringify([words, CLI_VERDICTS]));
  const cells = await page.$$eval('#headline-penalties td[data-metric="penalty"]:not([data-across])',
    (tds) => tds.map((td) => Object.assign({text: td.textContent}, td.dataset)));
  const bad = [];
  let n = 0;
  for (const m of REPORT.models) {
    for (const r of m.results.filter((x) => x.metric === 'penalty' && x.intervention !== 'correct')) {
      n++;
      const cell = cells.find((c) => c.model === m.model && c.intervention === r.intervention);
      if (!cell) { bad.push(`${m.model} ${r.intervention}: not in the headline`); continue; }
      if (r.value === null) { if (cell.text !== 'undefined') bad.push(`${m.model} ${r.intervention}: ${cell.text}`); continue; }
      const shown = shownNumbers(cell.text);
      const want = [r.value, r.ci_low, r.ci_high];
      if (!close(Number(cell.value), r.value) || !close(Number(cell.ciLow), r.ci_low) || !close(Number(cell.ciHigh), r.ci_high) ||
          shown.length !== 3 || want.some((w, k) => Math.abs(shown[k].value - w) > shown[k].tol)) {
        bad.push(`${m.model} ${r.intervention}: "${cell.text}" != ${want.join(', ')}`);
      }
    }
  }
  check(n > 0 && cells.length === n && bad.length === 0,
    `job ${FINISHED}: the headline shows each intervention's penalty [CI] of fca report (${n})`, bad.join('\n'));
  await page.setViewport(before);
}

// A running job's progress bar and text are on the first screen, a phone's
// included.
async function runningJob(ctx) {
  const {page, check, OUT, BASE, RUNNING} = ctx;
  const before = page.viewport();
  for (const screen of SCREENS) {
    await open(page, BASE, `#/job/${RUNNING}`, '#job-progress', screen);
    const b = await boxes(page, ['#job-progress', '#job-progress-text']);
    check(onScreen(b['#job-progress'], screen) && onScreen(b['#job-progress-text'], screen),
      `job ${RUNNING} at ${screen.width}x${screen.height}: its progress is above the fold`, JSON.stringify(b));
    await shot(page, OUT, `first-job-${RUNNING}-${screen.width}`);
  }
  await page.setViewport(before);
}

// The saved HTML report (a file, no server): at 1280 and 800 px nothing
// is wider than the page but inside the tables' and charts' scroll boxes,
// no chart is shrunk to fit (its text stays at least 11 px), and every
// chart names its x and its y axis.
async function savedReport(ctx, file) {
  const {browser, check, OUT} = ctx;
  const page = await browser.newPage();
  try {
    const url = `file://${path.resolve(file)}`;
    await page.setRequestInterception(true);
    const fetched = [];
    page.on('request', (req) => {
      if (req.url() !== url && !req.url().startsWith('data:')) fetched.push(req.url());
      return req.url() === url ? req.continue() : req.abort('blockedbyclient');
    });
    for (const width of [1280, 800]) {
      await page.setViewport({width, height: 800});
      await page.goto(url, {waitUntil: 'load'});
      const r = await page.evaluate(() => {
        const BOXES = '.table-wrap, .chart-wrap';
        const vw = document.documentElement.clientWidth;
        const out = [];
        let boxes = 0;
        for (const e of document.body.querySelectorAll('*')) {
          const box = e.matches(BOXES);
          if (!box && e.parentElement.closest(BOXES)) continue;
          const rect = e.getBoundingClientRect();
          if (rect.width === 0 && rect.height === 0) continue;
          const name = `${e.tagName.toLowerCase()}${e.className && typeof e.className === 'string' ? '.' + e.className : ''}`;
          if (rect.left < -0.5 || rect.right > vw + 0.5) out.push(`${name} spans ${Math.round(rect.left)}..${Math.round(rect.right)} of ${vw}`);
          if (box) {
            boxes++;
            if (!['auto', 'scroll'].includes(getComputedStyle(e).overflowX)) out.push(`${name} clips`);
          }
        }
        if (document.documentElement.scrollWidth > vw) out.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
        const tables = [...document.querySelectorAll('table')].filter((t) => !t.parentElement.matches('.table-wrap')).length;
        // Fitted by scrolling, not by shrinking: chart text stays at least
        // 11 px as drawn (its CSS size times the SVG's scale on screen).
        for (const t of document.querySelectorAll('svg.chart text')) {
          const m = t.getScreenCTM();
          const px = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
          if (px < 11 - 1e-6) out.push(`chart text "${t.textContent}" ${px.toFixed(1)} px`);
        }
        const charts = [...document.querySelectorAll('svg.chart')].map((s) => ({
          title: s.querySelector('title').textContent,
          x: (s.querySelector('text.axis-x') || {}).textContent || '',
          y: (s.querySelector('text.axis-y') || {}).textContent || '',
          wrapped: s.parentElement.matches('.chart-wrap'),
        }));
        return {out, boxes, tables, charts};
      });
      check(r.out.length === 0 && r.tables === 0 && r.boxes > 0,
        `saved report at ${width} px: nothing wider than the page but inside its ${r.boxes} scroll boxes, chart text unshrunk`,
        r.out.slice(0, 10).join('\n'));
      const unlabelled = r.charts.filter((c) => !c.x.trim() || !c.y.trim() || !c.wrapped);
      check(r.charts.length >= 2 && unlabelled.length === 0,
        `saved report at ${width} px: its ${r.charts.length} charts label both axes`, JSON.stringify(unlabelled));
      await shot(page, OUT, `saved-report-${width}`);
    }
    check(fetched.length === 0, 'saved report: fetches nothing', fetched.join('\n'));
  } finally {
    await page.close();
  }
}

module.exports = {home, finishedJob, runningJob, savedReport};
