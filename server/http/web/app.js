// fca dashboard: the job list, a job's page (live progress over server-sent
// events, the report's tables and per-layer plots), model pages and a
// comparison of jobs or models. Plain JavaScript, no build step, nothing
// fetched but this server's /api/v1 (docs/fca.md defines every number).
//
// Routes (in the URL's fragment, so the server serves one page):
//   #/jobs?state=RUNNING&model=M&label=L&dataset=D   the queue and the job list (filters)
//   #/job/ID                                          one job
//   #/models, #/model/NAME                            models, one model's jobs
//   #/compare?jobs=1,2&models=a,b                     jobs or models side by side
//
// The header's project selector (ListProjects) picks the project whose jobs
// the lists show (the `project` of ListJobs); "" is the caller's personal
// project, the server's default. It is kept for the browser tab.
//
// Server strings only ever reach the page as text (textContent and
// attributes), never as markup.
'use strict';

(() => {
  const API = '/api/v1/';
  const KEY_STORE = 'fca.apiKey';
  const PROJECT_STORE = 'fca.project';
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const STATES = ['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
  const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
  const STATE_MARK = {QUEUED: '○', RUNNING: '▶', SUCCEEDED: '✓', FAILED: '✗', CANCELLED: '■'};
  // Paul Tol's colour-blind-safe "bright" palette; every series also has its
  // own number, fill pattern, marker shape and line style.
  const COLOURS = ['#4477aa', '#ee6677', '#228833', '#ccbb44', '#66ccee', '#aa3377', '#777777'];
  const DASHES = ['', '6 3', '2 3', '8 3 2 3', '4 4', '1 3', '10 4'];

  // What an error's status code means to someone at the page: one sentence
  // per code (the gateway's error body names the code, absl's spelling),
  // shown instead of the code itself. UNAUTHENTICATED depends on whether a
  // key was sent: see plainError.
  const PLAIN_ERRORS = {
    UNAUTHENTICATED: 'Sign in with your API key.',
    PERMISSION_DENIED: 'Your API key is not allowed to do this.',
    NOT_FOUND: 'Not found.',
    INVALID_ARGUMENT: 'The server did not accept this request.',
    FAILED_PRECONDITION: 'Not possible in the job\'s current state.',
    OUT_OF_RANGE: 'A value is out of its range.',
    ALREADY_EXISTS: 'That already exists.',
    RESOURCE_EXHAUSTED: 'The server is at one of its limits; try again later.',
    UNAVAILABLE: 'The server cannot be reached right now; it will be tried again.',
    DEADLINE_EXCEEDED: 'The server took too long to answer.',
    ABORTED: 'The request was interrupted; try again.',
    CANCELLED: 'The request was cancelled.',
    UNIMPLEMENTED: 'This server does not offer that.',
    INTERNAL: 'The server failed on this request.',
    UNKNOWN: 'The server failed on this request.',
    DATA_LOSS: 'The server\'s stored data for this is damaged.',
  };
  const KEY_REFUSED = 'That API key was not accepted. Sign in with a valid key.';

  // What a slowdown_verdict row's value (+1 / -1 / 0, docs/fca.md
  // "Execution") says: the words of common/vocabulary.h as GetServerInfo
  // serves them (MetricInfo.value_words, kept by vocabulary() below; every
  // view that shows results asks for the vocabulary first), so the page and
  // `fca results` cannot drift apart. Before the vocabulary has come, the
  // number itself.
  let verdictWords = [];
  function verdictWord(v) {
    const sign = v > 0 ? 1 : v < 0 ? -1 : 0;
    const w = verdictWords.find((x) => num(x.value) === sign);
    return w ? w.word : String(v);
  }

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

  function link(href, text) { return el('a', {href}, text); }
  const jobHref = (id) => `#/job/${encodeURIComponent(id)}`;
  const modelHref = (m) => `#/model/${encodeURIComponent(m)}`;

  // ------------------------------------------------------------------ API

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message || `HTTP ${status}`);
      this.status = status;
      this.code = code;
    }
  }

  function authHeaders(extra) {
    const headers = Object.assign({}, extra);
    const key = sessionStorage.getItem(KEY_STORE);
    if (key) headers.Authorization = `Bearer ${key}`;
    return headers;
  }

  async function failure(res) {
    const text = await res.text();
    let body = {};
    try { body = text ? JSON.parse(text) : {}; } catch (e) { body = {message: text}; }
    const err = new ApiError(res.status, body.code, body.message || res.statusText);
    if (res.status === 401) askForKey(plainError(err).sentence);
    return err;
  }

  // An error in words: {sentence, detail}. The sentence comes from
  // PLAIN_ERRORS by the status code (HTTP's when the body names none); the
  // server's own message is the detail, except for a missing or refused
  // key, whose message speaks to CLI users (FCA_TOKEN, --token).
  function plainError(err) {
    if (!(err instanceof ApiError)) {
      const unreachable = /fetch|network/i.test(String(err.message || err));
      return {sentence: unreachable ? 'The server could not be reached.' : 'Something went wrong on this page.',
        detail: String(err.message || err)};
    }
    const byStatus = {400: 'INVALID_ARGUMENT', 401: 'UNAUTHENTICATED', 403: 'PERMISSION_DENIED', 404: 'NOT_FOUND',
      409: 'ABORTED', 429: 'RESOURCE_EXHAUSTED', 501: 'UNIMPLEMENTED', 503: 'UNAVAILABLE', 504: 'DEADLINE_EXCEEDED'};
    const code = err.code || byStatus[err.status] || (err.status >= 500 ? 'INTERNAL' : 'INVALID_ARGUMENT');
    if (code === 'UNAUTHENTICATED') {
      return {sentence: sessionStorage.getItem(KEY_STORE) ? KEY_REFUSED : PLAIN_ERRORS.UNAUTHENTICATED, detail: ''};
    }
    return {sentence: PLAIN_ERRORS[code] || PLAIN_ERRORS.UNKNOWN, detail: err.message === `HTTP ${err.status}` ? '' : err.message};
  }
  const errorText = (err) => { const p = plainError(err); return p.detail ? `${p.sentence} ${p.detail}` : p.sentence; };

  // POST /api/v1/<rpc> with a proto3-JSON request; resolves to the response.
  async function call(rpc, request, signal) {
    const res = await fetch(API + rpc, {
      method: 'POST', signal, body: JSON.stringify(request || {}),
      headers: authHeaders({'Content-Type': 'application/json', Accept: 'application/json'}),
    });
    if (!res.ok) throw await failure(res);
    return res.json();
  }

  // The audit's vocabulary as GetServerInfo serves it (common/vocabulary.h):
  // the interventions in report order, which of them are static profiles,
  // and every metric with what it is stored under and its label. Asked for
  // once; a failed call is asked again next time.
  let vocabularyPromise = null;
  function vocabulary() {
    if (!vocabularyPromise) {
      vocabularyPromise = call('GetServerInfo', {}).then((info) => {
        const verdict = (info.metrics || []).find((m) => m.name === 'slowdown_verdict');
        verdictWords = (verdict && verdict.value_words) || [];
        return info;
      }).then((info) => ({
        interventions: (info.interventions || []).map((i) => i.name),
        profiles: (info.interventions || []).filter((i) => i.static_profile).map((i) => i.name),
        // name -> " (explained by the current token)" for the token-keyed
        // profiles, "" for the others.
        readings: Object.fromEntries((info.interventions || []).map((i) => [i.name, i.retention_reading || ''])),
        metrics: info.metrics || [],
        // The ways to group sites (per_layer_scope) and the metrics of their
        // replays: [{name, nll_metric, penalty_metric}].
        groupScopes: info.group_scopes || [],
      }));
      vocabularyPromise.catch(() => { vocabularyPromise = null; });
    }
    return vocabularyPromise;
  }

  // The metrics stored under `under` ("execution", "variation"; "" for
  // those of every intervention) at `scope` (GetServerInfo's MetricScope
  // without its prefix: "MODEL", "LAYER", "FAMILY", ...), in report order,
  // as [name, label, unit].
  function metricsUnder(vocab, under, scope = 'MODEL') {
    return vocab.metrics.filter((x) => x.intervention === under && x.scope === `METRIC_SCOPE_${scope}`)
      .map((x) => [x.metric, x.label, x.unit]);
  }
  const labelOf = (vocab, metric) => (vocab.metrics.find((x) => x.metric === metric) || {}).label || metric;

  // A row's typed key as one string: `k` is a key (Result.key) or a
  // model-level metric's name. Lookups go by it, so none parses a name.
  function keyId(i, k) {
    const key = typeof k === 'string' ? {metric: k} : k;
    // Every field but the scope, by name: a field the proto adds takes part
    // with no change here. Empty ones are left out, as the JSON leaves them.
    const fields = Object.keys(key).filter((f) => f !== 'scope' && key[f] !== '' && key[f] !== undefined && key[f] !== null)
      .sort().map((f) => `${f}=${key[f]}`);
    return [i, ...fields].join('\t');
  }
  const metricOf = (k) => (typeof k === 'string' ? k : k.metric);

  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
  });

  // Streams a job's events (GET /api/v1/jobs/<id>/events, server-sent
  // events; fetch rather than EventSource so the API key header goes along)
  // to onEvent(WatchJobResponse) until the job's terminal event. A dropped
  // stream resumes after the last seq seen.
  async function watchJob(id, onEvent, signal) {
    let seq = 0;
    let failures = 0;
    while (!signal.aborted) {
      try {
        const res = await fetch(`${API}jobs/${encodeURIComponent(id)}/events?after_seq=${seq}`,
          {headers: authHeaders({Accept: 'text/event-stream'}), signal});
        if (!res.ok) throw await failure(res);
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffer = '';
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, {stream: true}).replace(/\r\n?/g, '\n');
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = block.split('\n').filter((l) => l.startsWith('data:'))
              .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
            if (!data) continue;
            const msg = JSON.parse(data);
            seq = Math.max(seq, Number(msg.event && msg.event.seq) || 0);
            failures = 0;
            onEvent(msg);
            if (msg.job && TERMINAL.has(stateName(msg.job.state))) return;
          }
        }
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof ApiError && err.status >= 400 && err.status < 500 && err.status !== 429) {
          throw err;
        }
        if (++failures > 30) throw err;
      }
      await sleep(1000, signal);
    }
  }

  // Runs fn now and every `ms` until the view goes away; shows an error in
  // `status` (a polite live region: only failures are announced) and keeps
  // trying.
  async function poll(fn, ms, signal, status) {
    while (!signal.aborted) {
      try {
        await fn();
        if (status) status.textContent = '';
      } catch (err) {
        if (signal.aborted) return;
        if (status) status.textContent = `Update failed. ${errorText(err)}`;
        if (err instanceof ApiError && err.status === 401) return;
      }
      await sleep(ms, signal);
    }
  }

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

  // How a metric is shown (the same digits as `fca report`). `scale`: what
  // the shown number is of the stored value (slowdown is shown in %).
  function metricFormat(metric) {
    if (metric === 'nll' || metric === 'live_nll') return {f: fixed(4), sd: fixed(4)};
    if (metric === 'penalty') return {f: signed(4), sd: fixed(4)};
    if (metric === undefined) return {f: general, sd: general};
    if (metric === 'retention_pct') return {f: fixed(1), sd: fixed(1)};
    if (metric === 'eta2' || metric === 'eta2_layer' || metric === 'blocks_executed_fraction') {
      return {f: fixed(4), sd: fixed(4)};
    }
    if (metric.endsWith('latency_us_per_token')) return {f: fixed(2), sd: fixed(2)};
    if (metric === 'slowdown_verdict') return {f: verdictWord, sd: general, words: true};
    if (metric === 'slowdown' || metric === 'flops_overhead') {
      return {f: (v) => `${signed(1)(100 * v)}%`, sd: (v) => `${fixed(1)(100 * v)}%`, scale: 100};
    }
    return {f: general, sd: general};
  }

  // A table cell for one stored row: "value [ci_low, ci_high]" or
  // "undefined", with the exact numbers in data- attributes.
  function resultCell(r, metric, extra) {
    const attrs = Object.assign({class: 'num'}, extra);
    if (!r) return el('td', attrs, '–');
    const {f, scale, words} = metricFormat(metricOf(metric));
    const defined = resultF.defined(r);
    const [lo, hi] = [resultF.ciLow(r), resultF.ciHigh(r)];
    Object.assign(attrs, {
      'data-model': resultF.model(r), 'data-intervention': resultF.intervention(r), 'data-metric': resultF.metric(r),
      'data-value': defined ? resultF.value(r) : null, 'data-defined': defined ? 'true' : 'false',
      'data-ci-low': lo, 'data-ci-high': hi, 'data-scale': scale, 'data-words': words ? 'true' : null,
    });
    if (!defined) return el('td', attrs, 'undefined');
    let text = f(num(resultF.value(r)));
    if (!words && lo !== undefined && hi !== undefined) text += ` [${f(num(lo))}, ${f(num(hi))}]`;
    return el('td', attrs, text);
  }

  // "mean ± sd [min, max]" across the audited models (defined values only);
  // for a metric shown as words, how many models say each word ("2 slower,
  // 1 no detectable difference", as `fca report` does).
  function acrossCell(m, extra) {
    const a = m && resultF.across(m);
    const attrs = Object.assign({class: 'num'}, extra);
    if (!a || (num(a.n) === 0 && num(a.undefined) === 0)) return el('td', attrs, '–');
    const {f, sd, scale, words} = metricFormat(resultF.key(m).metric);
    if (words) {
      const counts = new Map();
      for (const r of resultF.perModel(m).filter(resultF.defined)) {
        const w = f(num(resultF.value(r)));
        counts.set(w, (counts.get(w) || 0) + 1);
      }
      return el('td', Object.assign(attrs, {'data-across': 'true', 'data-words': 'true', 'data-intervention': resultF.intervention(m),
        'data-metric': resultF.metric(m)}), [...counts].map(([w, n]) => `${n} ${w}`).join(', ') || 'undefined');
    }
    const n = num(a.n);
    const undef = num(a.undefined) || 0;
    Object.assign(attrs, {
      'data-across': 'true', 'data-intervention': resultF.intervention(m), 'data-metric': resultF.metric(m),
      'data-n': n, 'data-scale': scale,
    });
    if (n === 0) return el('td', attrs, 'undefined');
    Object.assign(attrs, {'data-mean': a.mean, 'data-sd': a.sd, 'data-min': a.min, 'data-max': a.max});
    let text = `${f(num(a.mean))} ± ${sd(num(a.sd))} [${f(num(a.min))}, ${f(num(a.max))}]`;
    if (undef > 0) text += ` (${undef} undefined)`;
    return el('td', attrs, text);
  }

  // --------------------------------------------------------------- charts

  // Round ticks covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
  function ticks(lo, hi) {
    if (!isFinite(lo) || !isFinite(hi) || !(hi > lo)) return [];
    const raw = (hi - lo) / 5;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    let step = power;
    for (const m of [2, 5, 10]) if (raw > step) step = m * power;
    const out = [];
    for (let k = Math.ceil(lo / step); k <= Math.floor(hi / step) && out.length < 12; k++) {
      out.push(k * step);
    }
    return out;
  }

  // A y axis over the values (padded; a flat series still gets a range).
  function yScale(values, top, bottom) {
    const finite = values.filter((v) => isFinite(v));
    let lo = Math.min(...finite);
    let hi = Math.max(...finite);
    if (!finite.length) { lo = 0; hi = 1; }
    const mag = Math.max(Math.abs(lo), Math.abs(hi));
    if (!(hi - lo > 1e-9 * mag)) {
      const pad = mag === 0 ? 1 : mag * 0.1;
      lo -= pad;
      hi += pad;
    }
    const pad = (hi - lo) * 0.06;
    lo -= pad;
    hi += pad;
    const y = (v) => top + ((hi - v) / (hi - lo)) * (bottom - top);
    return {lo, hi, y};
  }

  function axis(svg, scale, left, right) {
    for (const t of ticks(scale.lo, scale.hi)) {
      const y = scale.y(t);
      svg.append(sv('line', {x1: left, y1: y, x2: right, y2: y, stroke: t === 0 ? '#444' : '#ddd'}),
        sv('text', {x: left - 6, y: y + 4, 'text-anchor': 'end', class: 'tick'}, general(t)));
    }
  }

  // Fill pattern k (solid, hatched, dotted ...) in colour k, defined in `defs`.
  function pattern(defs, k) {
    const id = nextId('pat');
    const c = COLOURS[k % COLOURS.length];
    const p = sv('pattern', {id, patternUnits: 'userSpaceOnUse', width: 6, height: 6});
    p.append(sv('rect', {width: 6, height: 6, fill: k % 7 === 0 ? c : '#fff'}));
    const stroke = {stroke: c, 'stroke-width': 1.6};
    switch (k % 7) {
      case 1: p.append(sv('path', Object.assign({d: 'M-1,7 L7,-1'}, stroke))); break;
      case 2: p.append(sv('circle', {cx: 3, cy: 3, r: 1.6, fill: c})); break;
      case 3: p.append(sv('path', Object.assign({d: 'M-1,7 L7,-1 M-1,-1 L7,7'}, stroke))); break;
      case 4: p.append(sv('path', Object.assign({d: 'M0,3 H6'}, stroke))); break;
      case 5: p.append(sv('path', Object.assign({d: 'M3,0 V6'}, stroke))); break;
      case 6: p.append(sv('path', Object.assign({d: 'M-1,-1 L7,7'}, stroke))); break;
      default: break;
    }
    defs.append(p);
    return `url(#${id})`;
  }

  // Marker k at (x, y): circle, square, triangle, diamond, inverted
  // triangle, plus, cross.
  function marker(k, x, y, r = 4) {
    const c = COLOURS[k % COLOURS.length];
    const a = {fill: c, stroke: c, 'stroke-width': 1.5};
    const pts = (list) => list.map(([dx, dy]) => `${x + dx},${y + dy}`).join(' ');
    switch (k % 7) {
      case 0: return sv('circle', Object.assign({cx: x, cy: y, r}, a));
      case 1: return sv('rect', Object.assign({x: x - r, y: y - r, width: 2 * r, height: 2 * r}, a));
      case 2: return sv('polygon', Object.assign({points: pts([[0, -r - 1], [r + 1, r], [-r - 1, r]])}, a));
      case 3: return sv('polygon', Object.assign({points: pts([[0, -r - 1], [r + 1, 0], [0, r + 1], [-r - 1, 0]])}, a));
      case 4: return sv('polygon', Object.assign({points: pts([[0, r + 1], [r + 1, -r], [-r - 1, -r]])}, a));
      case 5: return sv('path', Object.assign({d: `M${x - r},${y} H${x + r} M${x},${y - r} V${y + r}`}, a, {'stroke-width': 2.5}));
      default: return sv('path', Object.assign({d: `M${x - r},${y - r} L${x + r},${y + r} M${x - r},${y + r} L${x + r},${y - r}`}, a, {'stroke-width': 2.5}));
    }
  }

  // The legend: each series' number, swatch (pattern or marker and line)
  // and name, so nothing rests on colour alone.
  function legend(series, kind) {
    return el('ul', {class: 'legend'}, series.map((name, k) => {
      const s = sv('svg', {width: kind === 'bar' ? 16 : 30, height: 16, 'aria-hidden': 'true'});
      if (kind === 'bar') {
        const defs = sv('defs');
        s.append(defs, sv('rect', {x: 1, y: 1, width: 14, height: 14, fill: pattern(defs, k),
          stroke: COLOURS[k % COLOURS.length]}));
      } else {
        s.append(sv('line', {x1: 1, y1: 8, x2: 29, y2: 8, stroke: COLOURS[k % COLOURS.length],
          'stroke-width': 1.5, 'stroke-dasharray': DASHES[k % DASHES.length]}), marker(k, 15, 8, 3.5));
      }
      return el('li', {}, s, el('span', {}, `${k + 1}. ${name}`));
    }));
  }

  // A chart keeps its drawn size (its text stays at the CSS px sizes of
  // style.css) and scrolls sideways in its box where the page is narrower.
  function chartWrap(svg, title) {
    return el('div', {class: 'chart-wrap', role: 'region', 'aria-label': title, tabindex: 0}, svg);
  }

  // Room for a chart's title (bold 12 px from x = 64; 7.5 px a character
  // covers the system fonts' widest digits and capitals).
  const titleWidth = (title) => 64 + 7.5 * title.length + 8;

  function chartSvg(width, height, title) {
    const titleId = nextId('chart-title');
    const svg = sv('svg', {class: 'chart', width, height, viewBox: `0 0 ${width} ${height}`,
      role: 'img', 'aria-labelledby': titleId});
    svg.append(sv('title', {id: titleId}, title),
      sv('text', {x: 64, y: 16, class: 'title'}, title));
    return svg;
  }

  // Grouped bars with CI whiskers: groups [{label, bars: [{k, value, lo, hi,
  // tip}], summary: {mean, sd, tip}}], series names. Every bar carries its
  // series number above it.
  function barChart({title, yLabel, groups, series, id, note}) {
    const n = series.length + (groups.some((g) => g.summary) ? 1 : 0);
    const barW = Math.max(14, Math.min(40, 240 / Math.max(n, 1)));
    // Wide enough for its label too (12 px text, about 7.5 px a character):
    // one model's bars alone are narrower than an intervention's name.
    const labelW = 7.5 * Math.max(0, ...groups.map((g) => g.label.length)) + 30;
    const groupW = Math.max(n * barW + 30, labelW);
    const left = 64, right = 16, top = 30, bottom = 250;
    const width = Math.max(titleWidth(title), left + right + Math.max(1, groups.length) * groupW);
    const svg = chartSvg(width, bottom + 44, title);
    const defs = sv('defs');
    svg.append(defs);
    const fills = series.map((_, k) => pattern(defs, k));
    const values = [0];
    for (const g of groups) {
      for (const b of g.bars) values.push(b.value, b.lo, b.hi);
      if (g.summary) values.push(g.summary.mean - g.summary.sd, g.summary.mean + g.summary.sd);
    }
    const scale = yScale(values.filter((v) => v !== undefined), top, bottom);
    axis(svg, scale, left, width - right);
    svg.append(sv('text', {x: 14, y: (top + bottom) / 2, transform: `rotate(-90 14 ${(top + bottom) / 2})`,
      'text-anchor': 'middle', class: 'tick'}, yLabel));
    groups.forEach((g, gi) => {
      const g0 = left + gi * groupW + 15;
      const x0 = g0 + (groupW - 30 - n * barW) / 2;  // the bars centred under the label
      for (const b of g.bars) {
        if (!isFinite(b.value)) continue;
        const x = x0 + b.k * barW;
        const y = scale.y(b.value);
        const y0 = scale.y(0);
        const c = COLOURS[b.k % COLOURS.length];
        svg.append(sv('rect', {x: x + 1, y: Math.min(y, y0), width: barW - 2, height: Math.max(1, Math.abs(y0 - y)),
          fill: fills[b.k], stroke: c, 'data-series': b.k, 'data-group': g.label, 'data-value': b.value},
        sv('title', {}, b.tip)));
        const xm = x + barW / 2;
        let labelY = Math.min(y, y0) - 4;
        if (isFinite(b.lo) && isFinite(b.hi)) {
          const yl = scale.y(b.lo);
          const yh = scale.y(b.hi);
          svg.append(sv('path', {d: `M${xm},${yl} V${yh} M${xm - 4},${yl} H${xm + 4} M${xm - 4},${yh} H${xm + 4}`,
            stroke: '#222', 'stroke-width': 1.5, fill: 'none'}));
          labelY = Math.min(labelY, yh - 4);
        }
        svg.append(sv('text', {x: xm, y: labelY, 'text-anchor': 'middle', class: 'tick'}, String(b.k + 1)));
      }
      if (g.summary && isFinite(g.summary.mean)) {
        const xm = x0 + series.length * barW + barW / 2;
        const s = g.summary;
        svg.append(sv('path', {d: `M${xm},${scale.y(s.mean - s.sd)} V${scale.y(s.mean + s.sd)}`,
          stroke: '#000', 'stroke-width': 1.5}),
        sv('polygon', {points: `${xm},${scale.y(s.mean) - 6} ${xm + 6},${scale.y(s.mean)} ${xm},${scale.y(s.mean) + 6} ${xm - 6},${scale.y(s.mean)}`,
          fill: '#000'}, sv('title', {}, s.tip)));
      }
      svg.append(sv('text', {x: g0 + (groupW - 30) / 2, y: bottom + 18, 'text-anchor': 'middle'}, g.label));
    });
    const kids = [chartWrap(svg, title), legend(series, 'bar')];
    if (groups.some((g) => g.summary)) kids.push(el('p', {class: 'note'}, '◆ with a bar: mean ± sd across the models of the job.'));
    return el('figure', {id}, note ? el('figcaption', {}, note) : null, kids);
  }

  // Lines over layers: series [{name, points: [{x, y, tip}]}]; each with its
  // marker shape, line style and number at its last point.
  function layerChart({title, yLabel, series}) {
    const maxLayer = Math.max(0, ...series.flatMap((s) => s.points.map((p) => p.x)));
    const left = 64, right = 30, top = 30, bottom = 200;
    const width = Math.max(360, titleWidth(title), left + right + 60 * (maxLayer + 1));
    const svg = chartSvg(width, bottom + 46, title);
    const scale = yScale(series.flatMap((s) => s.points.map((p) => p.y)), top, bottom);
    axis(svg, scale, left, width - right);
    const step = (width - right - left) / (maxLayer + 1);
    const x = (layer) => left + step * (layer + 0.5);
    for (let l = 0; l <= maxLayer; l++) {
      svg.append(sv('text', {x: x(l), y: bottom + 18, 'text-anchor': 'middle', class: 'tick'}, String(l)));
    }
    svg.append(sv('text', {x: (left + width - right) / 2, y: bottom + 36, 'text-anchor': 'middle', class: 'tick'}, 'layer'),
      sv('text', {x: 14, y: (top + bottom) / 2, transform: `rotate(-90 14 ${(top + bottom) / 2})`,
        'text-anchor': 'middle', class: 'tick'}, yLabel));
    series.forEach((s, k) => {
      const pts = s.points.filter((p) => isFinite(p.y));
      if (!pts.length) return;
      svg.append(sv('polyline', {points: pts.map((p) => `${x(p.x)},${scale.y(p.y)}`).join(' '), fill: 'none',
        stroke: COLOURS[k % COLOURS.length], 'stroke-width': 1.5, 'stroke-dasharray': DASHES[k % DASHES.length]}));
      for (const p of pts) {
        const m = marker(k, x(p.x), scale.y(p.y));
        m.append(sv('title', {}, p.tip));
        m.setAttribute('data-series', k);
        svg.append(m);
      }
      const last = pts[pts.length - 1];
      svg.append(sv('text', {x: x(last.x) + 8, y: scale.y(last.y) - 6, class: 'tick'}, String(k + 1)));
    });
    return el('figure', {}, chartWrap(svg, title), legend(series.map((s) => s.name), 'line'));
  }

  // --------------------------------------------------------------- report

  // Lookups over a GetReportResponse.
  // Lookups over a GetReportResponse by typed key (keyId).
  function reportIndex(rep) {
    const metrics = new Map();
    for (const m of rep.metrics || []) metrics.set(keyId(resultF.intervention(m), resultF.key(m)), m);
    const twin = new Map();
    for (const r of rep.dense_twin_rows || []) twin.set(keyId(resultF.intervention(r), resultF.key(r)), r);
    return {
      models: rep.models || [],
      metric: (i, k) => metrics.get(keyId(i, k)),
      find: (model, i, k) => resultF.perModel(metrics.get(keyId(i, k)) || {}).find((r) => resultF.model(r) === model),
      twin: (i, k) => twin.get(keyId(i, k)),
      // Every metric of the report as {i, key}, in the server's order.
      entries: () => (rep.metrics || []).map((m) => ({i: resultF.intervention(m), key: resultF.key(m), name: resultF.metric(m)})),
    };
  }

  // A table with a row per (intervention, metric) and a column per model,
  // then mean ± sd [min, max] across models, then the dense twin.
  function metricTable(ix, caption, rows, opts = {}) {
    const many = ix.models.length > 1;
    const twin = opts.twin || '';
    const head = [opts.rowHead || 'metric', ...ix.models.map((m) => ({text: m, num: true}))];
    if (many) head.push({text: 'mean ± sd [min, max]', num: true});
    if (twin) head.push({text: `${twin} (dense twin)`, num: true});
    return table({caption, head, id: opts.id, rows: rows.map((row) => {
      opts.shown && opts.shown.add(keyId(row.i, row.m));
      const cells = ix.models.map((m) => resultCell(ix.find(m, row.i, row.m), row.m));
      if (many) cells.push(acrossCell(ix.metric(row.i, row.m)));
      if (twin) cells.push(resultCell(ix.twin(row.i, row.m), row.m));
      return {th: row.label, key: `${row.i}/${(ix.metric(row.i, row.m) || {}).metric || metricOf(row.m)}`, cells};
    })});
  }

  const unitOf = (ix, i, m) => ((ix.metric(i, m) || {}).unit || '');
  const withUnit = (label, unit) => (unit && unit !== '1' ? `${label} (${unit})` : label);

  function penaltyChartOf(ix, interventions, id) {
    const groups = interventions.filter((i) => i !== 'correct' && ix.metric(i, 'penalty')).map((i) => {
      const bars = [];
      ix.models.forEach((m, k) => {
        const r = ix.find(m, i, 'penalty');
        if (!r || !r.defined) return;
        const f = metricFormat('penalty').f;
        const ci = r.ci_low !== undefined ? ` [${f(num(r.ci_low))}, ${f(num(r.ci_high))}]` : '';
        bars.push({k, value: num(r.value), lo: num(r.ci_low), hi: num(r.ci_high), tip: `${m} ${i}: ${f(num(r.value))}${ci}`});
      });
      const a = (ix.metric(i, 'penalty') || {}).across_models;
      const summary = ix.models.length > 1 && a && num(a.n) > 0
        ? {mean: num(a.mean), sd: num(a.sd), tip: `${i}: mean ${signed(4)(num(a.mean))} ± ${fixed(4)(num(a.sd))}`}
        : null;
      return {label: i, bars, summary};
    });
    if (!groups.length) return null;
    return barChart({title: 'Penalty per intervention (nats/token, 95% CI)', yLabel: 'penalty (nats/token)',
      groups, series: ix.models, id});
  }

  // "Against the dense twin D: a slower, b no detectable difference."
  function verdictLine(ix, twin) {
    const said = ix.models.map((m) => [m, ix.find(m, 'execution', 'slowdown_verdict')]).filter(([, r]) => r && resultF.defined(r));
    if (!said.length) return null;
    return el('p', {id: 'verdicts'}, `Against the dense twin ${twin || ''}: `, said.map(([m, r], k) =>
      [k ? ', ' : '', `${m} `, el('strong', {'data-model': m, 'data-value': resultF.value(r)}, verdictWord(num(resultF.value(r))))]), '.');
  }

  // The per-group dependence rows of `per_layer_interventions` (docs/fca.md
  // "Per-group dependence"): under I, a group scope's penalty and NLL
  // metrics at each group (the vocabulary's group_scopes: layer, site or
  // family), then group_penalty_sum and group_additivity. Each group as
  // {scope, group, m: its penalty's key, nll: its NLL's key, name: the
  // penalty's stored name}; layers in numeric order, other groups as stored.
  function groupsOf(ix, vocab, i) {
    const found = [];
    for (const {i: at, key, name} of ix.entries()) {
      const scope = vocab.groupScopes.find((g) => g.penalty_metric === key.metric);
      if (at !== i || !scope) continue;
      const group = key.scope === 'METRIC_SCOPE_LAYER' ? String(key.layer) : (key.site || key.family);
      found.push({scope: scope.name, group, m: key, nll: Object.assign({}, key, {metric: scope.nll_metric}), name});
    }
    return found.sort((a, b) => (a.scope === 'layer' && b.scope === 'layer' ? Number(a.group) - Number(b.group) : 0));
  }

  // A group's share of I's whole-model penalty: penalty(I at g) / penalty(I),
  // only where the whole-model penalty's CI lies above 0 (as
  // group_additivity; else the ratio has no meaning).
  function shareOf(ix, model, i, metric) {
    const whole = ix.find(model, i, 'penalty');
    const part = ix.find(model, i, metric);
    if (!whole || !part || !resultF.defined(whole) || !resultF.defined(part) || !(num(resultF.ciLow(whole)) > 0)) return NaN;
    return num(resultF.value(part)) / num(resultF.value(whole));
  }

  function shareCell(ix, model, i, g) {
    const v = shareOf(ix, model, i, g.m);
    return el('td', {class: 'num', 'data-share': isFinite(v) ? v : null, 'data-model': model, 'data-group-metric': g.name},
      isFinite(v) ? `${(100 * v).toFixed(1)}%` : '–');
  }

  // Per intervention: a headline (the group carrying most of the penalty),
  // bars per group with their CIs, and a table with each group's penalty
  // and share, the sum over groups and the additivity.
  function perGroupSection(ix, vocab, interventions, shown) {
    const parts = [];
    const f = metricFormat('penalty').f;
    for (const i of interventions) {
      const groups = groupsOf(ix, vocab, i);
      if (!groups.length) continue;
      const scope = groups[0].scope;
      const name = (g) => `${g.scope} ${g.group}`;
      const headline = ix.models.map((m) => {
        const best = groups.map((g) => [g, shareOf(ix, m, i, g.m)]).filter(([, v]) => isFinite(v))
          .sort((a, b) => b[1] - a[1])[0];
        return best ? el('li', {'data-model': m, 'data-group': best[0].group},
          `${m}: ${name(best[0])} carries ${(100 * best[1]).toFixed(0)}% of ${i}'s whole-model penalty`) : null;
      }).filter(Boolean);
      const bars = groups.map((g) => {
        const list = [];
        ix.models.forEach((m, k) => {
          const r = ix.find(m, i, g.m);
          if (!r || !resultF.defined(r)) return;
          list.push({k, value: num(resultF.value(r)), lo: num(resultF.ciLow(r)), hi: num(resultF.ciHigh(r)),
            tip: `${m} ${i} at ${name(g)}: ${f(num(resultF.value(r)))}`});
        });
        const a = resultF.across(ix.metric(i, g.m) || {});
        const summary = ix.models.length > 1 && a && num(a.n) > 0
          ? {mean: num(a.mean), sd: num(a.sd), tip: `${name(g)}: mean ${f(num(a.mean))} ± ${fixed(4)(num(a.sd))}`} : null;
        return {label: name(g), bars: list, summary};
      });
      const id = `per-${scope}-${i}`;
      const many = ix.models.length > 1;
      const head = [scope, ...ix.models.flatMap((m) => [{text: `penalty ${m}`, num: true}, {text: `share of ${m}'s whole-model penalty`, num: true}])];
      if (many) head.push({text: 'penalty mean ± sd [min, max]', num: true});
      const rows = groups.map((g) => {
        shown.add(keyId(i, g.m));
        const cells = ix.models.flatMap((m) => [resultCell(ix.find(m, i, g.m), 'penalty'), shareCell(ix, m, i, g)]);
        if (many) cells.push(acrossCell(ix.metric(i, g.m)));
        return {th: name(g), key: g.name, cells};
      });
      const summaryRow = (metric, label, fmt) => {
        if (!ix.metric(i, metric)) return null;
        shown.add(keyId(i, metric));
        const cells = ix.models.flatMap((m) => [resultCell(ix.find(m, i, metric), fmt), el('td', {class: 'num'}, '')]);
        if (many) cells.push(acrossCell(ix.metric(i, metric)));
        return {th: label, key: metric, cls: 'across', cells};
      };
      rows.push(...[summaryRow('penalty', `whole model (all ${scope}s at once)`, 'penalty'),
        summaryRow('group_penalty_sum', `sum over ${scope}s`, 'penalty'),
        summaryRow('group_additivity', `sum / whole model`, 'group_additivity')].filter(Boolean));
      const nllRows = groups.filter((g) => ix.metric(i, g.nll)).map((g) => ({i, m: g.nll, label: name(g)}));
      parts.push(el('h3', {}, `${i} at one ${scope} at a time`),
        headline.length ? el('ul', {class: 'headline', id: `${id}-headline`}, headline) : null,
        barChart({title: `Penalty of ${i} at one ${scope} (nats/token, 95% CI)`, yLabel: 'penalty (nats/token)',
          groups: bars, series: ix.models, id: `${id}-chart`}),
        table({caption: `${i} at one ${scope} at a time: penalty (nats/token, 95% CI) and share of the whole-model penalty`,
          id: `${id}-table`, head, rows}),
        nllRows.length ? el('details', {}, el('summary', {}, `NLL per ${scope}: ${i}`),
          metricTable(ix, `NLL with ${i} at one ${scope} (nats/token)`, nllRows, {shown, rowHead: scope, id: `${id}-nll`})) : null);
    }
    if (!parts.length) return null;
    return section('Dependence per layer', 'Each intervention of per_layer_interventions replayed at one group of sites (per_layer_scope; layer by default), the correct coefficients elsewhere: penalty(I at g) = NLL(I at g) − NLL(correct), with its 95% CI. Share = penalty(I at g) / penalty(I), shown when I\'s whole-model penalty CI lies above 0; the shares need not add to 100% (layers interact: sum / whole model).',
      parts);
  }

  function section(title, note, ...kids) {
    return el('section', {}, el('h2', {}, title), note ? el('p', {class: 'note'}, note) : null, kids);
  }

  // The report of one job: the tables of `fca report` (per model, and
  // mean ± sd [min, max] across models), penalty bars and per-layer plots.
  function renderReport(rep, vocab) {
    const ix = reportIndex(rep);
    if (!ix.models.length) return [el('p', {class: 'note'}, 'No result rows stored yet.')];
    const shown = new Set();
    const interventions = (rep.interventions || []).slice();
    const families = rep.families || [];
    const out = [];

    const weights = table({caption: 'Audited models', head: ['model', 'weights sha256', {text: 'eval windows', num: true}],
      rows: ix.models.map((m) => {
        const any = ix.find(m, 'replay', 'live_nll') || ix.find(m, 'correct', 'nll') || {};
        return {th: link(modelHref(m), m), cells: [el('td', {}, el('code', {}, shaPrefix(any.weights_sha256))), el('td', {class: 'num'}, any.n || '')]};
      })});
    out.push(section('Models', 'NLL in nats/token over the evaluation windows; replay fidelity is the largest |logit| difference of REPLAY(A(x)) against LIVE.',
      weights, metricTable(ix, 'Replay', [
        {i: 'replay', m: 'live_nll', label: withUnit(labelOf(vocab, 'live_nll'), unitOf(ix, 'replay', 'live_nll'))},
        {i: 'replay', m: 'max_abs_logit_diff', label: labelOf(vocab, 'max_abs_logit_diff')},
      ].filter((r) => ix.metric(r.i, r.m)), {shown, id: 'table-replay'})));

    const variation = [];
    for (const f of families) {
      variation.push(el('h3', {}, f), metricTable(ix, `Coefficient variation: ${f}`,
        metricsUnder(vocab, 'variation', 'FAMILY').map(([metric, label]) => ({i: 'variation', m: {metric, family: f}, label})).filter((r) => ix.metric(r.i, r.m)),
      {shown, id: `table-variation-${f}`}));
      const sites = (rep.sites || []).filter((s) => s.family === f);
      if (sites.length) {
        const charts = ['mean', 'variance'].map((what) => layerChart({
          title: `${f}: coefficient ${what} per layer`, yLabel: what,
          series: ix.models.map((m) => ({name: m, points: sites.filter((s) => s.model === m).map((s) => ({
            x: num(s.layer), y: num(s[what]), tip: `${m} ${s.site}: ${general(num(s[what]))}`}))})),
        }));
        variation.push(el('div', {class: 'charts'}, charts), el('details', {}, el('summary', {}, `Per-layer table: ${f}`),
          table({caption: `Coefficient mean and variance per site: ${f}`,
            head: ['model', 'site', {text: 'layer', num: true}, {text: 'mean', num: true}, {text: 'variance', num: true}],
            rows: sites.map((s) => ({th: s.model, cells: [el('td', {}, s.site), el('td', {class: 'num'}, s.layer),
              el('td', {class: 'num', 'data-site': s.site, 'data-model': s.model, 'data-mean': s.mean}, general(num(s.mean))),
              el('td', {class: 'num', 'data-variance': s.variance}, general(num(s.variance)))]}))})));
      }
    }
    out.push(section('Coefficient variation', 'eta2 layer = share of the variance explained by one mean per site (layer identity); eta2 = by one mean per site and channel; the within-site variance splits into between-input and within-input parts.', variation));

    const chart = penaltyChartOf(ix, interventions, 'penalty-chart');
    out.push(section('Functional dependence', 'penalty = NLL(I) − NLL(correct) in nats/token, with its paired 95% bootstrap CI.',
      chart,
      metricTable(ix, 'NLL per intervention (nats/token)', interventions.filter((i) => ix.metric(i, 'nll'))
        .map((i) => ({i, m: 'nll', label: i})), {shown, rowHead: 'intervention', id: 'table-nll'}),
      metricTable(ix, 'Penalty per intervention (nats/token, 95% CI)', interventions.filter((i) => ix.metric(i, 'penalty'))
        .map((i) => ({i, m: 'penalty', label: i})), {shown, rowHead: 'intervention', id: 'table-penalty'})));

    const perGroup = perGroupSection(ix, vocab, interventions, shown);
    if (perGroup) out.push(perGroup);

    const retention = vocab.profiles.filter((i) => ix.metric(i, 'retention_pct'));
    // A token-keyed profile's retention is input dependence explained by
    // the token, not a static profile's (docs/fca.md "Reading the
    // interventions in groups"): the server's vocabulary says which.
    const retentionLabel = (i) => `${i}${vocab.readings[i] || ''}`;
    out.push(section('Gap retention', '100 × (NLL(B) − NLL(P)) / (NLL(B) − NLL(correct)) against the job\'s retention_baseline B (default global_mean); undefined unless the gap\'s CI lies above 0.',
      retention.length ? metricTable(ix, 'Gap retention of the static profiles (%)', retention.map((i) => ({i, m: 'retention_pct', label: retentionLabel(i)})),
        {shown, rowHead: 'profile', id: 'table-retention'}) : el('p', {}, 'No retention rows.')));

    const execution = metricsUnder(vocab, 'execution').filter(([m]) => ix.metric('execution', m) || ix.twin('execution', m));
    out.push(section('Execution', 'Counted blocks and matmul FLOPs per token; slowdown = geometric mean over interleaved pairs of t_model / t_dense, minus 1, with its t-interval; the verdict says slower or faster only when both timing blocks agree, else no detectable difference.',
      verdictLine(ix, rep.dense_twin),
      metricTable(ix, 'Execution', execution.map(([m, label]) => ({i: 'execution', m, label: m === 'slowdown_verdict' ? 'verdict vs dense twin' : label})),
        {shown, twin: rep.dense_twin, id: 'table-execution'})));

    // Mixture-of-experts routing, per layer (docs/moe.md): the execution
    // metrics per router layer (experts run per token, the load's entropy),
    // each expert's share, and each intervention's top-k agreement with
    // LIVE, overall and per layer; which they are, the vocabulary says.
    const entries = ix.entries();
    const under = (i, scope) => metricsUnder(vocab, i, scope).map(([metric]) => metric);
    const layerMetrics = under('execution', 'LAYER');
    const routingLayers = [...new Set(entries.filter((e) => e.i === 'execution' && layerMetrics.includes(e.key.metric))
      .map((e) => Number(e.key.layer)))].sort((a, b) => a - b);
    if (routingLayers.length) {
      const perLayer = (metric, label) => routingLayers.map((l) => ({i: 'execution', m: {metric, layer: l}, label: `${label}, layer ${l}`}));
      const layerVocab = metricsUnder(vocab, 'execution', 'LAYER');
      const charts = layerVocab.map(([metric, label, unit]) => layerChart({
        title: `${withUnit(label, unit)} per layer`, yLabel: unit,
        series: ix.models.map((m) => ({name: m, points: routingLayers.map((l) => {
          const r = ix.find(m, 'execution', {metric, layer: l});
          return {x: l, y: r ? num(r.value) : NaN, tip: `${m} layer ${l}: ${r ? general(num(r.value)) : '–'}`};
        })})),
      }));
      const expertMetrics = under('execution', 'EXPERT');
      const shares = entries.filter((e) => e.i === 'execution' && expertMetrics.includes(e.key.metric))
        .sort((a, b) => a.key.layer - b.key.layer || a.key.expert - b.key.expert)
        .map((e) => ({i: 'execution', m: e.key, label: `layer ${e.key.layer}, expert ${e.key.expert}`}));
      // Per intervention, how often it routes a (token, layer) to LIVE's
      // expert set: overall, then per router layer (the metrics of every
      // intervention per layer that are no group scope's).
      const groupMetrics = vocab.groupScopes.flatMap((g) => [g.nll_metric, g.penalty_metric]);
      const layerAgreementMetrics = under('', 'LAYER').filter((metric) => !groupMetrics.includes(metric));
      const agreement = entries.filter((e) => e.key.metric === 'topk_agreement')
        .map((e) => ({i: e.i, m: e.key, label: e.i}));
      const layerAgreement = entries.filter((e) => layerAgreementMetrics.includes(e.key.metric))
        .map((e) => ({i: e.i, m: e.key, label: `${e.i}, layer ${e.key.layer}`}))
        .sort((a, b) => a.i.localeCompare(b.i) || Number(a.m.layer) - Number(b.m.layer));
      out.push(section('Routing', 'Mixture of experts: each intervention\'s top-k agreement with LIVE (the fraction of (token, router layer) routed to LIVE\'s expert set), then, in the LIVE pass, routed experts run per token, the entropy of the experts\' shares of the load (ln E when balanced) and each expert\'s share, per layer.',
        agreement.length ? metricTable(ix, 'Top-k agreement with LIVE', agreement, {shown, rowHead: 'intervention', id: 'table-topk'}) : null,
        layerAgreement.length ? el('details', {}, el('summary', {}, 'Top-k agreement per layer'),
          metricTable(ix, 'Top-k agreement with LIVE, per router layer', layerAgreement, {shown, rowHead: 'intervention', id: 'table-layer-topk'})) : null,
        el('div', {class: 'charts'}, charts),
        metricTable(ix, 'Routing per layer', layerVocab.flatMap(([metric, label, unit]) => perLayer(metric, withUnit(label, unit))),
          {shown, id: 'table-routing'}),
        el('details', {}, el('summary', {}, 'Expert shares'), metricTable(ix, 'Share of each layer\'s load per expert', shares, {shown, id: 'table-expert-share'}))));
    }

    // Whatever else is stored (the per-site rows are shown above).
    const rest = ix.entries().filter((e) => !shown.has(keyId(e.i, e.key)));
    if (rest.length) {
      out.push(section('Other rows', null, metricTable(ix, 'Other stored rows',
        rest.map((e) => ({i: e.i, m: e.key, label: withUnit(`${e.i} / ${e.name}`, unitOf(ix, e.i, e.key))})), {id: 'table-other'})));
    }
    if (ix.models.length > 1) {
      out.push(el('p', {class: 'note'}, `mean ± sd [min, max]: across the ${ix.models.length} audited models (sample standard deviation).`));
    }
    return out;
  }

  // ------------------------------------------------------------ job lists

  function progressBar(fraction, label, big) {
    const pct = Math.max(0, Math.min(100, 100 * (num(fraction) || 0)));
    return el('span', {class: `bar${big ? ' big' : ''}`, role: 'progressbar', 'aria-label': label,
      'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': pct.toFixed(1), 'data-fraction': num(fraction) || 0},
    el('span', {style: `width: ${pct.toFixed(2)}%`}));
  }

  // The jobs table; `selected`: a Set of job ids ticked for comparison.
  function jobsTable(jobs, caption, selected, id) {
    return table({caption, id, head: ['job', 'compare', 'state', 'progress', 'models', 'dense twin', 'eval / calib',
      'label', 'owner', 'project', 'created', 'finished'],
    rows: jobs.map((j) => {
      const jid = String(j.id);
      const state = stateName(j.state);
      const spec = j.spec || {};
      const box = el('input', {type: 'checkbox', 'aria-label': `Compare job ${jid}`, checked: selected.has(jid),
        onchange: (e) => (e.target.checked ? selected.add(jid) : selected.delete(jid))});
      const pct = `${(100 * (num(j.progress) || 0)).toFixed(0)}%`;
      return {th: link(jobHref(jid), jid), key: jid, cells: [
        el('td', {}, box),
        el('td', {'data-state': state}, stateBadge(j.state), j.cancel_requested && !TERMINAL.has(state) ? ' (cancelling)' : ''),
        el('td', {}, state === 'RUNNING' || state === 'QUEUED'
          ? [progressBar(j.progress, `Progress of job ${jid}`), ` ${pct}`] : ''),
        el('td', {}, (spec.models || []).map((m, k) => [k ? ', ' : '', link(modelHref(m), m)])),
        el('td', {}, spec.dense_twin ? link(modelHref(spec.dense_twin), spec.dense_twin) : ''),
        el('td', {}, `${spec.eval_dataset || ''} / ${spec.calib_dataset || ''}`),
        el('td', {}, spec.label || ''),
        el('td', {class: 'owner'}, j.owner || ''),
        el('td', {class: 'project'}, j.project || ''),
        el('td', {}, fmtTime(j.created_at)),
        el('td', {}, fmtTime(j.finished_at)),
      ]};
    })});
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
    main.append(el('h1', {}, 'Jobs'), queuePanel(signal), form, el('p', {}, compareButton(selected)), holder, more,
      status);
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
      holder.replaceChildren(jobsTable(jobs, `Jobs, newest first: ${jobs.length} of ${total} shown (updated live)`, selected, 'jobs-table'));
      more.hidden = !res.next_page_token;
    }
    await poll(refresh, 2000, signal, status);
  }

  // ------------------------------------------------------------- the queue

  // The front page's queue (GetQueue): totals, each model's tasks and the
  // server's workers holding it loaded or running it, the caller's projects
  // (the server sums the others in one unnamed row) and the caller's own
  // jobs with their places in line. Refreshed every few seconds.
  function queuePanel(signal) {
    const n = (v) => num(v) || 0;
    const counts = (o, ...keys) => keys.map((k) => el('td', {class: 'num', 'data-field': k}, String(n(o[k]))));
    const panel = el('section', {id: 'queue', class: 'queue', 'aria-labelledby': 'queue-title'});
    const totals = el('p', {id: 'queue-totals'});
    const holder = el('div');
    const status = el('p', {class: 'note', 'aria-live': 'polite'});
    panel.append(el('h2', {id: 'queue-title'}, 'Queue'), totals, holder, status);
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

  // ------------------------------------------------------------ projects

  // The project the lists show: the selector's, "" (the personal project).
  const chosenProject = () => sessionStorage.getItem(PROJECT_STORE) || '';
  function inProject(request) {
    const project = chosenProject();
    return project ? Object.assign({project}, request) : request;
  }

  // Fills the header's selector from ListProjects, keeping the choice when
  // it is still one of the caller's projects.
  async function projectSelector() {
    const select = document.getElementById('project');
    let projects = [];
    try {
      projects = (await call('ListProjects', {})).projects || [];
    } catch (err) {
      select.parentElement.hidden = true;
      return;
    }
    const names = projects.map((p) => p.name);
    if (!names.includes(chosenProject())) sessionStorage.removeItem(PROJECT_STORE);
    select.replaceChildren(...projects.map((p, k) => el('option', {value: k === 0 ? '' : p.name,
      selected: (k === 0 ? '' : p.name) === chosenProject()},
    `${p.name}${k === 0 ? ' (personal)' : ''} · ${String(p.role || '').replace(/^PROJECT_ROLE_/, '').toLowerCase()}`)));
    select.parentElement.hidden = projects.length < 2;
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

  async function jobView(main, id, signal) {
    document.title = `Job ${id} · fca`;
    let job = (await call('GetJob', {job_id: String(id)}, signal)).job;
    const head = el('div');
    const live = el('div', {id: 'job-live'});
    const tasks = el('div');
    const log = el('ol', {class: 'log', 'aria-label': 'Events'});
    const report = el('div', {id: 'report', 'aria-live': 'off'});
    const h1 = el('h1');
    main.append(h1, head, live, tasks, el('details', {}, el('summary', {}, 'Events'), log),
      el('section', {}, el('h2', {}, 'Report'), el('p', {class: 'note'}, 'What the server stored for this job; `fca report ', String(id), '` prints the same tables.'), report));
    let lastProgress = null;

    function renderHead() {
      const state = stateName(job.state);
      h1.replaceChildren(`Job ${job.id} `, stateBadge(job.state));
      h1.setAttribute('data-state', state);
      const actions = el('p', {}, link(`#/compare?jobs=${job.id}`, 'Compare with other jobs'));
      if (!TERMINAL.has(state)) {
        actions.append(' ', el('button', {type: 'button', disabled: job.cancel_requested, onclick: async () => {
          if (!confirm(`Cancel job ${job.id}?`)) return;
          try { job = (await call('CancelJob', {job_id: String(job.id)}, signal)).job; renderHead(); } catch (err) { showError(live, err); }
        }}, job.cancel_requested ? 'Cancelling…' : 'Cancel job'));
      }
      head.replaceChildren(specList(job), actions);
      const text = el('span', {class: 'progress-text', id: 'job-progress-text'}, progressText(lastProgress, job.progress));
      live.replaceChildren(el('h2', {}, 'Progress'), el('p', {}, progressBar(job.progress, `Progress of job ${job.id}`, true), text));
      live.querySelector('[role=progressbar]').id = 'job-progress';
      tasks.replaceChildren(tasksTable(job), provenanceTable(job));
    }
    let reportTimer = null;
    async function loadReport() {
      reportTimer = null;
      try {
        const [rep, vocab] = await Promise.all([call('GetReport', {job_id: String(id)}, signal), vocabulary()]);
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

  // --------------------------------------------------------------- models

  async function modelsView(main, params, signal) {
    document.title = 'Models · fca';
    const listed = await call('ListModels', {}, signal);
    const models = listed.models || [];
    const unavailable = listed.unavailable || [];
    const selected = new Set();
    main.append(el('h1', {}, 'Models'), table({caption: 'Models of the server\'s repository', id: 'models-table',
      head: ['model', 'compare', 'family', {text: 'parameters', num: true}, {text: 'layers', num: true},
        {text: 'sites', num: true}, 'tokenizer', {text: 'max window', num: true}],
      rows: models.map((m) => ({th: link(modelHref(m.name), m.name), cells: [
        el('td', {}, el('input', {type: 'checkbox', 'aria-label': `Compare model ${m.name}`,
          onchange: (e) => (e.target.checked ? selected.add(m.name) : selected.delete(m.name))})),
        el('td', {}, m.family), el('td', {class: 'num'}, general(num(m.num_parameters))), el('td', {class: 'num'}, m.num_layers),
        el('td', {class: 'num'}, (m.sites || []).length), el('td', {}, m.tokenizer), el('td', {class: 'num'}, m.max_seq_len)]}))}),
    el('p', {}, el('button', {type: 'button', onclick: () => {
      if (selected.size) location.hash = `#/compare?models=${[...selected].map(encodeURIComponent).join(',')}`;
    }}, 'Compare selected models (the newest finished job of each, changeable there)')));
    // Folders the server cannot serve, with why (as Triton's repository
    // index lists UNAVAILABLE models), so a missing model is explained.
    if (unavailable.length) {
      main.append(el('h2', {}, 'Unavailable'), table({caption: 'Folders whose config.json the server refused',
        id: 'unavailable-models', head: ['folder', 'reason'],
        rows: unavailable.map((u) => ({th: u.name, cells: [el('td', {}, u.reason)]}))}));
    }
  }

  async function modelView(main, name, signal) {
    document.title = `${name} · fca`;
    const models = (await call('ListModels', {}, signal)).models || [];
    const m = models.find((x) => x.name === name);
    main.append(el('h1', {}, `Model ${name}`));
    if (m) {
      main.append(el('dl', {class: 'spec'}, [['family', m.family], ['parameters', general(num(m.num_parameters))],
        ['layers', m.num_layers], ['vocabulary', m.vocab_size], ['max window', m.max_seq_len], ['tokenizer', m.tokenizer],
        ['weights sha256', m.weights_sha256 || '(not loaded yet)'], ['coefficient sites', (m.sites || []).length]]
        .map(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v ?? ''))])));
      if ((m.sites || []).length) {
        main.append(el('details', {}, el('summary', {}, 'Coefficient sites'), table({caption: `Coefficient sites of ${name}`,
          head: ['site', 'family', {text: 'layer', num: true}, {text: 'channels', num: true}],
          rows: m.sites.map((s) => ({th: s.name, cells: [el('td', {}, s.family), el('td', {class: 'num'}, s.layer),
            el('td', {class: 'num'}, s.channels)]}))})));
      }
    } else {
      main.append(el('p', {class: 'note'}, 'Not in the server\'s repository now; its jobs are listed below.'));
    }
    const selected = new Set();
    const holder = el('div');
    const compareAll = el('p');
    let shown = '';
    const status = el('p', {class: 'note', 'aria-live': 'polite'});
    main.append(el('h2', {}, 'Jobs that audited it'), el('p', {}, compareButton(selected, `&models=${encodeURIComponent(name)}`)),
      compareAll, holder, status);
    await poll(async () => {
      const res = await call('ListJobs', inProject({model: name, page_size: 200}), signal);
      const jobs = res.jobs || [];
      const seen = JSON.stringify(res);
      if (seen === shown) return;
      shown = seen;
      holder.replaceChildren(jobsTable(jobs, `Jobs auditing ${name} or naming it as dense twin (updated live)`, selected, 'model-jobs-table'));
      const done = jobs.filter((j) => stateName(j.state) === 'SUCCEEDED' && ((j.spec || {}).models || []).includes(name))
        .slice(0, 16).map((j) => j.id);
      compareAll.replaceChildren(done.length > 1
        ? link(`#/compare?jobs=${done.join(',')}&models=${encodeURIComponent(name)}`, `Compare ${name} across its ${done.length} finished jobs`) : '');
    }, 3000, signal, status);
  }

  // -------------------------------------------------------------- compare

  const listParam = (v) => String(v || '').split(',').map((s) => s.trim()).filter(Boolean);

  async function compareView(main, params, signal) {
    document.title = 'Compare · fca';
    let ids = listParam(params.jobs).filter((s) => /^\d+$/.test(s));
    const models = listParam(params.models);
    const jobsInput = el('input', {id: 'compare-jobs', name: 'jobs', value: ids.join(','), size: 16, placeholder: '1,2'});
    const modelsInput = el('input', {id: 'compare-models', name: 'models', value: models.join(','), size: 24, placeholder: 'any'});
    main.append(el('h1', {}, 'Compare jobs and models'), el('form', {class: 'filters', onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if (jobsInput.value) q.set('jobs', jobsInput.value);
      if (modelsInput.value) q.set('models', modelsInput.value);
      location.hash = `#/compare?${q}`.replace(/%2C/g, ',');
    }}, el('label', {for: 'compare-jobs'}, 'job ids', jobsInput), el('label', {for: 'compare-models'}, 'models', modelsInput),
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

  // ----------------------------------------------------- auth and routing

  function showError(where, err) {
    const {sentence, detail} = plainError(err);
    where.append(el('p', {class: 'error', role: 'alert', 'data-code': err.code || null},
      el('strong', {}, sentence), detail ? [' ', el('span', {class: 'detail'}, detail)] : null));
  }

  function askForKey(message) {
    const form = document.getElementById('login');
    form.hidden = false;
    document.getElementById('signed-in').hidden = true;
    const input = document.getElementById('api-key');
    input.setAttribute('aria-describedby', 'login-why');
    const why = document.getElementById('login-why') || form.appendChild(el('span', {id: 'login-why', class: 'note'}));
    why.textContent = message || PLAIN_ERRORS.UNAUTHENTICATED;
    input.focus();
  }

  function showAuthState(authOn) {
    const key = sessionStorage.getItem(KEY_STORE);
    document.getElementById('signed-in').hidden = !key;
    document.getElementById('login').hidden = !!key || !authOn;
  }

  async function serverInfo() {
    const foot = document.getElementById('server-info');
    try {
      const info = await call('GetServerInfo', {});
      showAuthState(info.auth);
      foot.textContent = [`fca-server ${info.server_version}`, `engine ${info.engine_version}`,
        info.torch_version ? `torch ${info.torch_version}` : '', `${info.dtype} on ${(info.devices || []).join(', ') || '?'}`,
        plural(num(info.workers), 'worker'), `executor ${info.executor}`, `auth ${info.auth ? 'on' : 'off'}`]
        .filter(Boolean).join(' · ');
    } catch (err) {
      foot.textContent = `Server information unavailable. ${errorText(err)}`;
    }
  }

  let current = null;
  function route() {
    if (current) current.abort();
    current = new AbortController();
    const signal = current.signal;
    const main = document.getElementById('main');
    main.replaceChildren();
    const hash = location.hash.replace(/^#\/?/, '');
    const q = hash.indexOf('?');
    const path = q >= 0 ? hash.slice(0, q) : hash;
    const params = Object.fromEntries(new URLSearchParams(q >= 0 ? hash.slice(q + 1) : ''));
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    let view;
    if (!parts.length || parts[0] === 'jobs') view = jobsView(main, params, signal);
    else if (parts[0] === 'job' && /^\d+$/.test(parts[1] || '')) view = jobView(main, parts[1], signal);
    else if (parts[0] === 'models') view = modelsView(main, params, signal);
    else if (parts[0] === 'model' && parts[1]) view = modelView(main, parts[1], signal);
    else if (parts[0] === 'compare') view = compareView(main, params, signal);
    else view = Promise.reject(new ApiError(404, 'NOT_FOUND', `There is no page at #/${path}.`));
    for (const a of document.querySelectorAll('nav a')) {
      const here = `#/${parts[0] || 'jobs'}`;
      if (a.getAttribute('href') === here || (here === '#/job' && a.getAttribute('href') === '#/jobs') ||
          (here === '#/model' && a.getAttribute('href') === '#/models')) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    view.catch((err) => { if (!signal.aborted) showError(main, err); });
  }

  function start() {
    document.getElementById('login').addEventListener('submit', (e) => {
      e.preventDefault();
      const input = document.getElementById('api-key');
      if (!input.value) return;
      sessionStorage.setItem(KEY_STORE, input.value);
      input.value = '';
      const why = document.getElementById('login-why');
      if (why) why.remove();
      showAuthState(true);
      serverInfo();
      projectSelector();
      route();
    });
    document.getElementById('project').addEventListener('change', (e) => {
      if (e.target.value) sessionStorage.setItem(PROJECT_STORE, e.target.value);
      else sessionStorage.removeItem(PROJECT_STORE);
      route();
    });
    document.getElementById('sign-out').addEventListener('click', () => {
      sessionStorage.removeItem(KEY_STORE);
      sessionStorage.removeItem(PROJECT_STORE);
      showAuthState(true);
      projectSelector();
      route();
    });
    window.addEventListener('hashchange', route);
    serverInfo();
    projectSelector();
    route();
  }
  start();
})();
