// fca dashboard: the pieces every other file uses (constants, the API's
// field names, building DOM nodes and tables, plain formatting). Plain
// JavaScript, no build step, nothing fetched but this server's /api/v1
// (docs/fca.md defines every number).
//
// index.html loads the dashboard's files as classic scripts, this one first
// and main.js (which starts the page) last. Each file is one function that
// takes what it uses from the namespace `window.fca` (made here) and adds
// what later files use, so a file uses only those loaded before it.
//
// Server strings only ever reach the page as text (textContent and
// attributes), never as markup.
'use strict';

window.fca = {};

(() => {
  const API = '/api/v1/';
  const KEY_STORE = 'fca.apiKey';
  const PROJECT_STORE = 'fca.project';
  // Which collapsible panels the user closed (or opened), kept across visits
  // in localStorage: the front page's queue, a job's settings.
  const QUEUE_OPEN_STORE = 'fca.queueOpen';
  const SETTINGS_OPEN_STORE = 'fca.settingsOpen';
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const STATES = ['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
  const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
  const STATE_MARK = {QUEUED: '○', RUNNING: '▶', SUCCEEDED: '✓', FAILED: '✗', CANCELLED: '■'};
  // Paul Tol's colour-blind-safe "bright" palette; every series also has its
  // own number, fill pattern, marker shape and line style.
  const COLOURS = ['#4477aa', '#ee6677', '#228833', '#ccbb44', '#66ccee', '#aa3377', '#777777'];
  const DASHES = ['', '6 3', '2 3', '8 3 2 3', '4 4', '1 3', '10 4'];

  // Field names of the API's JSON, one accessor each, so that a renamed
  // field is one line to change (docs/api.md). Result rows and GetReport's
  // metrics (a metric's rows are per_model, its summary across_models):
  const resultF = {
    intervention: (r) => r.intervention,
    metric: (r) => r.metric,
    // What the row is about, typed (Result.key: metric, scope, layer,
    // expert, site, family, baseline): read instead of parsing `metric`.
    key: (r) => r.key || {metric: r.metric},
    model: (r) => r.model,
    value: (r) => r.value,
    ciLow: (r) => r.ci_low,
    ciHigh: (r) => r.ci_high,
    defined: (r) => !!r.defined,
    perModel: (m) => m.per_model || [],
    across: (m) => m.across_models,
  };
  // Jobs (ListJobs, GetJob, GetReport.job):
  const jobF = {
    id: (j) => String(j.id),
    models: (j) => (j.spec || {}).models || [],
    label: (j) => (j.spec || {}).label || '',
    finishedAt: (j) => j.finished_at,
  };

  // ------------------------------------------------------------------ DOM

  function build(node, attrs, kids) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else if (k === 'text') node.textContent = v;
      // Through the CSSOM: the server's Content-Security-Policy forbids
      // style attributes (style-src 'self').
      else if (k === 'style') node.style.cssText = String(v);
      else node.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.append(kid instanceof Node ? kid : String(kid));
    }
    return node;
  }
  const el = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
  const sv = (tag, attrs, ...kids) => build(document.createElementNS(SVG_NS, tag), attrs, kids);
  let uid = 0;
  const nextId = (prefix) => `${prefix}-${++uid}`;

  // A table that scrolls sideways instead of overflowing the page, with a
  // caption and header scopes. `head`: column titles (the first heads the
  // row headers); `rows`: {th, cells: [td elements], cls}.
  function table({caption, head, rows, id}) {
    const thead = el('thead', {}, el('tr', {}, head.map((h) =>
      el('th', {scope: 'col', class: h.num ? 'num' : null}, h.text ?? h))));
    const tbody = el('tbody', {}, rows.map((r) =>
      el('tr', {class: r.cls, 'data-key': r.key}, el('th', {scope: 'row'}, r.th), r.cells)));
    const t = el('table', {id}, el('caption', {}, caption), thead, tbody);
    return el('div', {class: 'table-wrap', role: 'region', 'aria-label': caption, tabindex: 0}, t);
  }

  // A <details> panel whose open state is remembered under `store`
  // (localStorage: 'open' or 'closed'); `open` when nothing is remembered.
  function collapsible(store, open, attrs, summary, ...kids) {
    const remembered = localStorage.getItem(store);
    const panel = el('details', Object.assign({open: remembered ? remembered === 'open' : open}, attrs),
      el('summary', {}, summary), kids);
    panel.addEventListener('toggle', () => localStorage.setItem(store, panel.open ? 'open' : 'closed'));
    return panel;
  }

  function link(href, text) { return el('a', {href}, text); }
  const jobHref = (id) => `#/job/${encodeURIComponent(id)}`;
  const modelHref = (m) => `#/model/${encodeURIComponent(m)}`;

  // ---------------------------------------------------------- formatting

  const num = (v) => (v === undefined || v === null || v === '' ? NaN : Number(v));
  const stateName = (s) => String(s || 'JOB_STATE_UNSPECIFIED').replace(/^JOB_STATE_/, '');
  function stateBadge(s) {
    const name = stateName(s);
    return el('span', {class: `state state-${name}`}, `${STATE_MARK[name] || '?'} ${name}`);
  }
  function fmtTime(ts) {
    if (!ts) return '';
    const d = new Date(ts);
    return isNaN(d) ? String(ts) : `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
  }
  // A list's time: UTC to the minute (the caption says UTC), the full time
  // on hover.
  function shortTime(ts) {
    const full = fmtTime(ts);
    return full ? el('time', {datetime: ts, title: full}, full.slice(0, 16)) : '';
  }
  const shaPrefix = (s) => (s ? String(s).slice(0, 12) : '');
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many || one + 's'}`;

  // printf's %.4g: four significant digits, trailing zeros dropped.
  function general(v) {
    if (!isFinite(v)) return String(v);
    const s = v.toPrecision(4);
    if (s.includes('e')) {
      const [m, e] = s.split('e');
      return (m.includes('.') ? m.replace(/\.?0+$/, '') : m) + 'e' + e;
    }
    return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
  }
  const fixed = (d) => (v) => (isFinite(v) ? v.toFixed(d) : String(v));
  const signed = (d) => (v) => (isFinite(v) ? (v >= 0 ? '+' : '') + v.toFixed(d) : String(v));

  Object.assign(window.fca, {API, KEY_STORE, PROJECT_STORE, QUEUE_OPEN_STORE, SETTINGS_OPEN_STORE, STATES,
    TERMINAL, COLOURS, DASHES, resultF, jobF, el, sv, nextId, table, collapsible, link, jobHref, modelHref, num,
    stateName, stateBadge, fmtTime, shortTime, shaPrefix, plural, general, fixed, signed});
})();
