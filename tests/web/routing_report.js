// The Routing section of a mixture of experts' job page (dashboard_test.js
// runs it with --routing_job): the numbers shown are those the server
// stored, read back over the API. Its helpers are dashboard_test.js's.
'use strict';

// A finished audit of a mixture of experts (--routing_job, olmoe-tiny: 2
// router layers of 8 experts, top-2, audited with static_layer and
// random_route besides correct): its page shows the Routing section with the numbers the
// server stored, read back over the API.
async function routingReport(page, {BASE, args, callApi, check, shownNumbers, checkAccessible, shot}) {
  const job = args.routing_job;
  const metrics = ['topk_agreement', ...[0, 1].flatMap((l) => [`experts_per_token.${l}`, `expert_load_entropy.${l}`])];
  const rows = (await callApi(page, 'QueryResults', {filter: {job_id: job, metrics}, page_size: 1000}, args.api_key)).body.results || [];
  const stored = (i, m) => rows.find((r) => r.intervention === i && r.metric === m);
  await page.goto(`${BASE}/#/job/${job}`, {waitUntil: 'load'});
  await page.waitForSelector('#table-routing', {timeout: 60000});
  const table = (id) => page.$$eval(`#${id} tbody tr`, (trs) => trs.map((tr) =>
    [tr.querySelector('th').textContent, tr.querySelector('td').textContent]));
  const shownMatches = (cell, row) => row && shownNumbers(cell).some((n) => Math.abs(n.value - row.value) <= n.tol);
  const perLayer = await table('table-routing');
  const layers = [0, 1];
  check(perLayer.length === 4 && layers.every((l) =>
    shownMatches(perLayer[l][1], stored('execution', `experts_per_token.${l}`)) &&
    stored('execution', `experts_per_token.${l}`).value === 2 &&
    shownMatches(perLayer[2 + l][1], stored('execution', `expert_load_entropy.${l}`))),
  'routing: experts per token (2 of 8) and load entropy per layer, as stored', JSON.stringify(perLayer));
  const agreement = await table('table-topk');
  const wanted = ['correct', 'static_layer', 'random_route'];  // correct: 1, its own routing
  check(wanted.every((i) => agreement.some(([th, td]) => th === i && shownMatches(td, stored(i, 'topk_agreement')))),
    'routing: top-k agreement with LIVE per intervention, as stored', JSON.stringify(agreement));
  const random = stored('random_route', 'topk_agreement');
  check(stored('correct', 'topk_agreement').value === 1 && random && random.value < 1,
    'routing: correct keeps LIVE\'s expert sets, random routes leave them', JSON.stringify(random));
  const layerRows = await table('table-layer-topk');
  check(layerRows.length === wanted.length * layers.length, 'routing: top-k agreement per router layer', JSON.stringify(layerRows));
  const shares = await table('table-expert-share');
  check(shares.length === 16, 'routing: a share for each of 8 experts in each layer', String(shares.length));
  // Partial overlap (fca.md "Routing agreement"): correct keeps all of
  // LIVE's experts; random_route keeps a share at least its agreement.
  const overlapRows = (await callApi(page, 'QueryResults', {filter: {job_id: job, metrics: ['topk_overlap']}, page_size: 100}, args.api_key)).body.results || [];
  const overlapOf = (i) => overlapRows.find((r) => r.intervention === i);
  const overlap = await table('table-topk-overlap');
  check(wanted.every((i) => overlap.some(([th, td]) => th === i && shownMatches(td, overlapOf(i)))) &&
    overlapOf('correct').value === 1 && overlapOf('random_route').value >= random.value,
  'routing: top-k overlap with LIVE per intervention, as stored (correct 1, random_route at least its agreement)', JSON.stringify(overlap));
  // The co-activation heatmap of layer 0: 8 x 8, symmetric, each cell the
  // stored expert_coactivation row; with k = 2 the pairs sum to 1.
  const pairNames = [];
  for (let a = 0; a < 8; a++) for (let b = a + 1; b < 8; b++) pairNames.push(`expert_coactivation.0.${a}.${b}`);
  const pairRows = (await callApi(page, 'QueryResults', {filter: {job_id: job, metrics: pairNames}, page_size: 100}, args.api_key)).body.results || [];
  const cells = await page.$$eval('#table-coactivation td[data-expert]', (tds) => tds.map((td) => [Number(td.dataset.expert), Number(td.dataset.partner), Number(td.dataset.value)]));
  const storedPair = (a, b) => pairRows.find((r) => r.metric === `expert_coactivation.0.${Math.min(a, b)}.${Math.max(a, b)}`);
  const pairSum = pairRows.reduce((t, r) => t + r.value, 0);
  check(pairRows.length === 28 && cells.length === 56 && cells.every(([a, b, v]) => storedPair(a, b) && Math.abs(storedPair(a, b).value - v) < 1e-12) &&
    Math.abs(pairSum - 1) < 1e-9,
  'routing: the co-activation heatmap of layer 0 shows every stored pair, both ways, summing to k(k-1)/2 = 1', `${cells.length} cells, ${pairRows.length} rows, sum ${pairSum}`);
  await page.select('#routing-layer', '1');
  const caption = await page.$eval('#table-coactivation caption', (c) => c.textContent);
  check(/layer 1/.test(caption), 'routing: choosing layer 1 redraws the heatmap', caption);
  const tokenRows = await table('table-token-experts');
  check(tokenRows.length > 0 && tokenRows.length <= 16, 'routing: the experts of up to 16 frequent token ids', String(tokenRows.length));
  // Its blocks read "2 of 8" (routed experts per token at each layer of 8
  // experts), not the sum over layers beside a dense model's layers.
  const blocks = await page.$eval('#table-execution tr[data-key="execution/blocks_per_token"] td', (td) => td.textContent);
  check(blocks === '2 of 8', 'routing: the execution table shows 2 of 8 experts, not blocks summed over layers', blocks);
  const other = await page.$$eval('#table-other tbody tr th', (ths) => ths.map((t) => t.textContent));
  check(!other.some((t) => /topk_agreement/.test(t)), 'routing: no agreement row left under "Other rows"', JSON.stringify(other));
  await checkAccessible(page, 'routing report');
  await shot(page, 'routing-report');
}

module.exports = {routingReport};
