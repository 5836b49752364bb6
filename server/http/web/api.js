// fca dashboard: the server's API (POST /api/v1/<rpc>, the job event
// stream), its errors in plain words, the sign-in form, the audit's
// vocabulary (GetServerInfo) and the project the lists show.
'use strict';

(() => {
  const {API, KEY_STORE, PROJECT_STORE, TERMINAL, el, num, stateName} = window.fca;

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
        // name -> its group ("input-dependent", ...), as `fca report` groups them.
        groups: Object.fromEntries((info.interventions || []).map((i) => [i.name, i.group || ''])),
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
    return vocab.metrics.filter((x) => x.intervention === under && String(x.scope).replace(/^METRIC_SCOPE_/, '') === scope)
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

  // ------------------------------------------------------------ sign-in

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

  Object.assign(window.fca, {verdictWord, ApiError, errorText, call, vocabulary, metricsUnder,
    labelOf, keyId, metricOf, watchJob, poll, showError, inProject, projectSelector});
})();
