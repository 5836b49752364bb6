// fca dashboard: the router and the start of the page (the last of the
// files index.html loads; core.js says how they fit together).
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
'use strict';

(() => {
  const {KEY_STORE, PROJECT_STORE, num, plural, ApiError, errorText, call, showError,
    projectSelector, jobsView, jobView, modelsView, modelView, compareView} = window.fca;

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
