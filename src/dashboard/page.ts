import { createHash } from 'node:crypto';

/**
 * The dashboard's one page. Everything is inline — no CDN, no framework, no build step: charts are
 * SVG drawn by ~150 lines of plain JS that polls `GET /api/state`. Every value from the database
 * is inserted with `textContent` (never innerHTML), since `last_error` is whatever a broker said.
 * The Content-Security-Policy allows exactly this script and this stylesheet by hash.
 */
const STYLE = String.raw`
:root { --bg:#0f1419; --panel:#171e26; --line:#263241; --text:#d8dee6; --dim:#8b98a8;
        --accent:#4aa3ff; --good:#3fb950; --warn:#d29922; --bad:#f85149; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif;
       background:var(--bg); color:var(--text); }
header { display:flex; align-items:center; gap:16px; padding:12px 20px;
         border-bottom:1px solid var(--line); }
header h1 { font-size:16px; margin:0; }
header .updated { color:var(--dim); margin-left:auto; } #engine { color:var(--dim); }
main { padding:16px 20px; display:grid; gap:16px; grid-template-columns:repeat(3, 1fr); }
section { background:var(--panel); border:1px solid var(--line); border-radius:6px; padding:12px; }
section h2 { font-size:13px; font-weight:600; color:var(--dim); margin:0 0 8px;
             text-transform:uppercase; letter-spacing:.04em; }
.tiles { grid-column:1 / -1; display:grid; grid-template-columns:repeat(6, 1fr); gap:12px;
         background:none; border:none; padding:0; }
.tile { background:var(--panel); border:1px solid var(--line); border-radius:6px; padding:10px 12px; }
.tile .label { color:var(--dim); font-size:12px; }
.tile .value { font-size:26px; font-weight:600; font-variant-numeric:tabular-nums; }
.tile.bad .value { color:var(--bad); } .tile.warn .value { color:var(--warn); }
.wide { grid-column:1 / -1; }
svg { width:100%; height:170px; display:block; }
svg .axis { stroke:var(--line); } svg text { fill:var(--dim); font-size:12px; }
svg .series { fill:none; stroke:var(--accent); stroke-width:2; }
svg .series.rate { stroke:var(--good); } svg .bar { fill:var(--accent); }
table { width:100%; border-collapse:collapse; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { color:var(--dim); font-weight:500; font-size:12px; }
td.error { color:var(--bad); font-family:ui-monospace, monospace; font-size:12px;
           word-break:break-word; }
.empty { color:var(--dim); padding:8px 0; } .muted { color:var(--dim); }
button { background:var(--accent); color:#fff; border:0; border-radius:4px; padding:4px 10px;
         cursor:pointer; font:inherit; } button:disabled { opacity:.5; cursor:default; }
#notice { color:var(--warn); } #token-form { display:none; gap:6px; } #token-form.shown { display:flex; }
td.payload { font-family:ui-monospace, monospace; font-size:12px; word-break:break-word; }
td.decide { white-space:nowrap; } td.decide input { width:auto; margin:0 4px; }
.decider { margin:0 0 8px; color:var(--dim); } button.reject { background:var(--bad); }
input { background:var(--bg); color:var(--text); border:1px solid var(--line); border-radius:4px;
        padding:4px 8px; font:inherit; }
@media (max-width: 1200px) { main { grid-template-columns:1fr; }
  .tiles { grid-template-columns:repeat(3, 1fr); } }
`;

const SCRIPT = String.raw`
(function () {
  'use strict';
  var token = sessionStorage.getItem('outbox-token') || '';
  var $ = function (id) { return document.getElementById(id); };
  var NS = 'http://www.w3.org/2000/svg';
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = String(text);
    return node;
  }
  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(NS, tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = String(text);
    return node;
  }
  function headers(json) {
    var h = {};
    if (json) h['content-type'] = 'application/json';
    if (token) h.authorization = 'Bearer ' + token;
    return h;
  }
  function age(s) {
    if (s < 1) return '0s';
    if (s < 120) return s.toFixed(1) + 's';
    if (s < 7200) return (s / 60).toFixed(1) + 'm';
    return (s / 3600).toFixed(1) + 'h';
  }
  function fmt(n) { return n >= 100 ? Math.round(n).toString() : (Math.round(n * 10) / 10).toString(); }

  // Charts are drawn in CSS pixels (the viewBox is the element's own size), so a 12px label is
  // 12px on screen at any width; a fixed 600-wide viewBox shrank them to ~7px in a narrow panel.
  function size(svg) { return { W: svg.clientWidth || 600, H: svg.clientHeight || 170 }; }

  function lineChart(svg, points, cls) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var box = size(svg), W = box.W, H = box.H, L = 48, B = 22;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    var values = points.filter(function (p) { return p.v !== null; });
    var max = Math.max(1, Math.max.apply(null, values.map(function (p) { return p.v; }).concat([0])));
    svg.appendChild(svgEl('line', { x1: L, y1: H - B, x2: W, y2: H - B, 'class': 'axis' }));
    svg.appendChild(svgEl('line', { x1: L, y1: 4, x2: L, y2: H - B, 'class': 'axis' }));
    svg.appendChild(svgEl('text', { x: L - 6, y: 14, 'text-anchor': 'end' }, fmt(max)));
    svg.appendChild(svgEl('text', { x: L - 6, y: H - B, 'text-anchor': 'end', 'class': 'tick' }, '0'));
    if (values.length === 0) {
      svg.appendChild(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'collecting samples...'));
      return;
    }
    var t0 = values[0].t, t1 = values[values.length - 1].t, span = Math.max(1, t1 - t0);
    var d = values.map(function (p, i) {
      var x = L + ((p.t - t0) / span) * (W - L - 4);
      var y = H - B - (p.v / max) * (H - B - 8);
      return (i ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
    }).join(' ');
    svg.appendChild(svgEl('path', { d: d, 'class': 'series ' + cls }));
    svg.appendChild(svgEl('text', { x: L, y: H - 5, 'class': 'tick' }, new Date(t0).toLocaleTimeString()));
    svg.appendChild(svgEl('text', { x: W - 2, y: H - 5, 'text-anchor': 'end', 'class': 'tick' }, new Date(t1).toLocaleTimeString()));
  }

  function seconds(x) { return x >= 60 ? x / 60 + 'm' : x + 's'; }
  // Bucket labels by upper bound ("<0.5s" ... "≥5m"): short enough for a 12px label per bar.
  function bucketLabel(lo, hi) { return hi === undefined ? '≥' + seconds(lo) : '<' + seconds(hi); }

  function histogram(svg, latency) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var box = size(svg), W = box.W, H = box.H, B = 22, n = latency.counts.length;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    var max = Math.max(1, Math.max.apply(null, latency.counts));
    var w = W / n;
    latency.counts.forEach(function (c, i) {
      var h = (c / max) * (H - B - 18);
      var bar = svgEl('rect', { x: i * w + 3, y: H - B - h, width: w - 6, height: h, 'class': 'bar' });
      bar.appendChild(svgEl('title', {}, c + ' messages'));
      svg.appendChild(bar);
      if (c > 0) svg.appendChild(svgEl('text', { x: i * w + w / 2, y: H - B - h - 3, 'text-anchor': 'middle' }, c));
      var lo = latency.edgesSeconds[i], hi = latency.edgesSeconds[i + 1];
      // Too narrow for every label (a small window): every other one.
      if (w >= 34 || i % 2 === 0)
        svg.appendChild(svgEl('text', { x: i * w + w / 2, y: H - 5, 'text-anchor': 'middle', 'class': 'bucket' },
          bucketLabel(lo, hi)));
    });
  }

  function tile(label, value, level) {
    var t = el('div', { 'class': 'tile' + (level ? ' ' + level : ''), 'data-tile': label });
    t.appendChild(el('div', { 'class': 'label' }, label));
    t.appendChild(el('div', { 'class': 'value' }, value));
    return t;
  }

  // Held messages (issue 20). Typed reasons survive the 3 s refresh: rows are rebuilt only when
  // the set of waiting messages changes, and a rebuilt row gets its reason back.
  var reasons = {};
  var shownApprovals = null;
  function renderApprovals(list) {
    var ids = list.map(function (m) { return m.id; }).join(',');
    $('approvals-empty').hidden = list.length > 0;
    if (ids === shownApprovals) {
      list.forEach(function (m) {
        var cell = document.querySelector('tr[data-approval-id="' + m.id + '"] td.age');
        if (cell) cell.textContent = age(m.ageSeconds);
      });
      return;
    }
    shownApprovals = ids;
    var body = $('approval-rows');
    body.replaceChildren();
    list.forEach(function (m) {
      var tr = el('tr', { 'data-approval-id': m.id });
      tr.appendChild(el('td', {}, /^[0-9]+$/.test(m.id) ? '#' + m.id : m.id));
      tr.appendChild(el('td', {}, m.topic));
      tr.appendChild(el('td', {}, m.aggregateId));
      tr.appendChild(el('td', { 'class': 'age' }, age(m.ageSeconds)));
      tr.appendChild(el('td', {}, (m.requestedBy || '') + (m.traceId ? ' · trace ' + m.traceId : '')));
      tr.appendChild(el('td', { 'class': 'payload' }, m.payloadSummary));
      var cell = el('td', { 'class': 'decide' });
      var approveButton = el('button', { 'data-approve': m.id }, 'Approve');
      // size: the placeholder's length, so the box is wide enough for it whatever the font.
      var hint = 'reason (required to reject)';
      var reason = el('input', { 'data-reason-for': m.id, placeholder: hint, size: String(hint.length + 2), maxlength: '2000' });
      reason.value = reasons[m.id] || '';
      var rejectButton = el('button', { 'data-reject': m.id, 'class': 'reject' }, 'Reject');
      rejectButton.disabled = reason.value.trim() === '';
      reason.addEventListener('input', function () {
        reasons[m.id] = reason.value;
        rejectButton.disabled = reason.value.trim() === '';
      });
      approveButton.addEventListener('click', function () { decide('approve', m.id, undefined, [approveButton, rejectButton]); });
      rejectButton.addEventListener('click', function () { decide('reject', m.id, reason.value, [approveButton, rejectButton]); });
      cell.appendChild(approveButton);
      cell.appendChild(reason);
      cell.appendChild(rejectButton);
      tr.appendChild(cell);
      body.appendChild(tr);
    });
  }

  function decide(verb, id, reason, buttons) {
    var by = $('decider').value.trim();
    if (!by) { $('notice').textContent = 'enter your name under "Deciding as" first'; $('decider').focus(); return; }
    if (verb === 'reject' && !(reason || '').trim()) { $('notice').textContent = 'a rejection needs a reason'; return; }
    buttons.forEach(function (b) { b.disabled = true; });
    var body = verb === 'approve' ? { ids: [id], by: by } : { ids: [id], by: by, reason: reason.trim() };
    fetch('/api/' + verb, { method: 'POST', headers: headers(true), body: JSON.stringify(body) })
      .then(function (r) {
        if (r.status === 401) { needToken(); throw new Error('token required'); }
        return r.json().then(function (answer) {
          if (!r.ok) throw new Error(answer.error || ('HTTP ' + r.status));
          delete reasons[id];
          $('notice').textContent = (verb === 'approve' ? 'approved #' : 'rejected #') + id + ' as ' + by;
        });
      })
      .catch(function (e) { $('notice').textContent = verb + ' failed: ' + e.message; shownApprovals = null; })
      .then(refresh);
  }

  var lastState = null;
  function drawCharts(state) {
    lineChart($('backlog-chart'), state.samples.map(function (p) { return { t: p.at, v: p.backlog }; }), '');
    lineChart($('rate-chart'), state.samples.map(function (p) { return { t: p.at, v: p.publishedPerSecond }; }), 'rate');
    histogram($('latency-chart'), state.latency);
  }

  function render(state) {
    lastState = state;
    var s = state.status;
    // The lanes engine (outbox ui --engine lanes): nothing in flight (a batch leases its lane),
    // the latency an upper bound from the lane cursors.
    var lanes = state.engine === 'lanes';
    var tiles = $('tiles');
    tiles.replaceChildren.apply(tiles, [
      tile('backlog', s.backlog, s.backlog > 1000 ? 'warn' : ''),
      tile('oldest pending', age(s.oldestPendingAgeSeconds), s.oldestPendingAgeSeconds > 300 ? 'warn' : ''),
      tile('due now', s.dueNow)].concat(lanes ? [] : [
      tile('in flight', s.inFlight)]).concat([
      tile('awaiting approval', s.awaitingApproval, s.oldestAwaitingApprovalAgeSeconds > 3600 ? 'warn' : ''),
      tile('dead letters', s.deadLetters, s.deadLetters > 0 ? 'bad' : '')]));
    $('latency-title').textContent = lanes ? 'Commit to publish latency, upper bound, last hour' : 'Dispatch latency, last hour';
    $('engine').textContent = lanes ? 'lanes engine' : '';
    renderApprovals((state.approvals || []).concat((state.callApprovals || []).map(function (c) {
      // A paused agent tool call (issue 42): decided like a message, by its call-<n> id.
      var input = JSON.stringify(c.input);
      return {
        id: c.approvalId, topic: 'tool ' + c.tool, aggregateId: 'call ' + c.callId,
        ageSeconds: Math.max(0, (state.now - Date.parse(c.requestedAt)) / 1000),
        requestedBy: (c.requestedBy || '') + (c.stateRef ? ' · run ' + c.stateRef : ''),
        payloadSummary: input.length > 120 ? input.slice(0, 119) + '…' : input
      };
    })));
    drawCharts(state);
    $('latency-total').textContent = state.latency.total + ' messages';

    var body = $('dead-rows');
    body.replaceChildren();
    state.deadLetters.forEach(function (d) {
      var tr = el('tr', { 'data-dead-id': d.id });
      tr.appendChild(el('td', {}, '#' + d.id));
      tr.appendChild(el('td', {}, d.topic));
      tr.appendChild(el('td', {}, d.aggregateId));
      tr.appendChild(el('td', {}, d.attempts));
      tr.appendChild(el('td', {}, new Date(d.deadLetteredAt).toLocaleString()));
      tr.appendChild(el('td', { 'class': 'error' }, d.lastError || ''));
      var cell = el('td');
      var button = el('button', { 'data-replay': d.id }, 'Replay');
      // The lanes engine replays by message id (its row ids are <lane>:<id>).
      button.addEventListener('click', function () { replay(lanes ? d.messageId : d.id, button); });
      cell.appendChild(button);
      // Lanes only: a dead letter that holds its aggregate (hold) can be given up, so that the
      // aggregate's later messages go on (skipLaneDeadLetters); one that holds nothing says so.
      if (lanes && d.blocking) {
        var skip = el('button', { 'data-skip': d.id, title: 'Never publish it; let the later messages of ' + d.aggregateId + ' go on, in order' }, 'Skip');
        skip.addEventListener('click', function () { skipDead(d.messageId, skip); });
        cell.appendChild(document.createTextNode(' '));
        cell.appendChild(skip);
      } else if (lanes) {
        cell.appendChild(el('span', { 'class': 'muted', title: 'Its aggregate goes on without it' }, ' skipped'));
      }
      tr.appendChild(cell);
      body.appendChild(tr);
    });
    $('dead-empty').hidden = state.deadLetters.length > 0;

    var errors = $('errors');
    errors.replaceChildren();
    // Messages still retrying only: each dead letter's error is in the dead-letter panel.
    state.lastErrors.forEach(function (e) {
      var tr = el('tr', { 'data-error-id': e.id });
      tr.appendChild(el('td', {}, '#' + e.id));
      tr.appendChild(el('td', {}, e.topic));
      tr.appendChild(el('td', {}, e.attempts));
      tr.appendChild(el('td', { 'class': 'error' }, e.lastError));
      errors.appendChild(tr);
    });
    $('errors-empty').hidden = state.lastErrors.length > 0;
    $('updated').textContent = 'updated ' + new Date(state.now).toLocaleTimeString() +
      (state.sampleError ? ' (sampling failed: ' + state.sampleError + ')' : '');
  }

  var refreshProblem = false;
  function needToken() { refreshProblem = true; $('token-form').classList.add('shown'); $('notice').textContent = 'token required'; }

  function refresh() {
    return fetch('/api/state', { headers: headers(false) }).then(function (r) {
      if (r.status === 401) { needToken(); return; }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      // Clear only what a failed refresh said; a replay's result stays until the next action.
      return r.json().then(function (state) { if (refreshProblem) { $('notice').textContent = ''; refreshProblem = false; } render(state); });
    }).catch(function (e) { refreshProblem = true; $('notice').textContent = 'cannot reach the dashboard server: ' + e.message; });
  }

  function replay(id, button) {
    button.disabled = true;
    fetch('/api/replay', { method: 'POST', headers: headers(true), body: JSON.stringify({ ids: [id] }) })
      .then(function (r) {
        if (r.status === 401) { needToken(); throw new Error('token required'); }
        return r.json().then(function (body) {
          if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
          $('notice').textContent = 'replayed ' + body.replayed.map(function (x) { return '#' + x.id; }).join(' ');
        });
      })
      .catch(function (e) { $('notice').textContent = 'replay failed: ' + e.message; button.disabled = false; })
      .then(refresh);
  }

  function skipDead(id, button) {
    button.disabled = true;
    fetch('/api/skip', { method: 'POST', headers: headers(true), body: JSON.stringify({ ids: [id] }) })
      .then(function (r) {
        if (r.status === 401) { needToken(); throw new Error('token required'); }
        return r.json().then(function (body) {
          if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
          $('notice').textContent = body.skipped.length
            ? 'skipped ' + body.skipped.map(function (x) { return '#' + x.id; }).join(' ') + ': the later messages of its aggregate go on'
            : 'nothing skipped: it no longer holds its aggregate';
        });
      })
      .catch(function (e) { $('notice').textContent = 'skip failed: ' + e.message; button.disabled = false; })
      .then(refresh);
  }

  $('decider').value = sessionStorage.getItem('outbox-decider') || '';
  $('decider').addEventListener('input', function () { sessionStorage.setItem('outbox-decider', $('decider').value); });
  $('token-form').addEventListener('submit', function (event) {
    event.preventDefault();
    token = $('token').value;
    sessionStorage.setItem('outbox-token', token);
    $('token-form').classList.remove('shown');
    refresh();
  });
  window.addEventListener('resize', function () { if (lastState) drawCharts(lastState); });
  refresh();
  setInterval(refresh, 3000);
})();
`;

const BODY = String.raw`
<header>
  <h1>agent-outbox</h1><span id="engine"></span>
  <span id="notice" role="status"></span>
  <form id="token-form"><input id="token" type="password" placeholder="dashboard token" autocomplete="off"><button>Use token</button></form>
  <span class="updated" id="updated">loading...</span>
</header>
<main>
  <div class="tiles" id="tiles"></div>
  <section><h2>Backlog</h2><svg id="backlog-chart" role="img" aria-label="backlog over time"></svg></section>
  <section><h2>Published per second</h2><svg id="rate-chart" role="img" aria-label="published rate over time"></svg></section>
  <section><h2><span id="latency-title">Dispatch latency, last hour</span> · <span id="latency-total"></span></h2><svg id="latency-chart" role="img" aria-label="latency histogram"></svg></section>
  <section class="wide" id="approvals"><h2>Awaiting approval</h2>
    <div class="decider"><label>Deciding as <input id="decider" placeholder="your name" autocomplete="name" maxlength="255"></label> — every decision is kept with the message: who, when, why.</div>
    <table><thead><tr><th>id</th><th>topic</th><th>aggregate</th><th>waiting</th><th>requested by</th><th>payload</th><th></th></tr></thead>
    <tbody id="approval-rows"></tbody></table><div class="empty" id="approvals-empty">Nothing waits for approval.</div></section>
  <section class="wide"><h2>Dead letters</h2>
    <table><thead><tr><th>id</th><th>topic</th><th>aggregate</th><th>attempts</th><th>dead since</th><th>last error</th><th></th></tr></thead>
    <tbody id="dead-rows"></tbody></table><div class="empty" id="dead-empty">No dead letters.</div></section>
  <section class="wide"><h2>Last errors · still retrying</h2>
    <table><thead><tr><th>id</th><th>topic</th><th>attempts</th><th>error</th></tr></thead>
    <tbody id="errors"></tbody></table><div class="empty" id="errors-empty">No message is retrying after an error.</div></section>
</main>
`;

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** The page's HTML. */
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>agent-outbox dashboard</title><style>${STYLE}</style></head>
<body>${BODY}<script>${SCRIPT}</script></body></html>
`;

/** Content-Security-Policy of the page: only its own inline script and style, same-origin API. */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');
