// fca dashboard: the models of the server's repository and one model's
// page with the jobs that audited it.
'use strict';

(() => {
  const {el, table, link, modelHref, num, stateName, general, call, poll, inProject, jobsTable,
    compareButton} = window.fca;

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
      holder.replaceChildren(jobsTable(jobs, `Jobs auditing ${name} or naming it as dense twin (updated live; times UTC)`, selected, 'model-jobs-table'));
      const done = jobs.filter((j) => stateName(j.state) === 'SUCCEEDED' && ((j.spec || {}).models || []).includes(name))
        .slice(0, 16).map((j) => j.id);
      compareAll.replaceChildren(done.length > 1
        ? link(`#/compare?jobs=${done.join(',')}&models=${encodeURIComponent(name)}`, `Compare ${name} across its ${done.length} finished jobs`) : '');
    }, 3000, signal, status);
  }

  Object.assign(window.fca, {modelsView, modelView});
})();
