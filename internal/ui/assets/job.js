// Job detail: what needs attention first (its agent's health, the remote
// resources), fields and limits, the actions its state allows, attempts,
// live log tail and timeline. The job, its events and attempts are
// re-fetched every 2 s while it is not finished (and once after it
// finishes).

import {query, isAbort} from './api.js';
import {h, s, replace, timeEl, formatTime, timeMode, duration, between, span, statusBadge, TERMINAL, sleep,
  field, showFieldError, clearFieldErrors, tableWrap, head} from './dom.js';
import {retriesExhausted} from './reason.js';

const FIELDS = [
  ['status', 'Status'], ['attempt', 'Attempt'], ['command', 'Command'], ['plugin', 'Plugin'],
  ['submitter', 'Submitter'], ['idempotency_key', 'Idempotency key'], ['agent', 'Agent'], ['lease', 'Lease'],
  ['created_at', 'Created'], ['started_at', 'Started'], ['attempt_started_at', 'Attempt started'],
  ['finished_at', 'Finished'], ['queued_for', 'Waited'], ['run_time', 'Ran'],
  ['updated_at', 'Updated'], ['run_after', 'Retry due'], ['expires_at', 'Expires'],
  ['waiting_for_cleanup', 'Waiting for cleanup'], ['error_class', 'Error class'], ['error', 'Error'],
  ['result', 'Result'], ['context', 'Context'],
];
const TIMES = new Set(['created_at', 'started_at', 'attempt_started_at', 'finished_at', 'updated_at', 'run_after', 'expires_at']);
// Derived fields: durations wherever a start and an end exist, the error
// class in words when the retries are used up.
const DERIVED = {
  queued_for: (j) => span(j.created_at, j.started_at || (TERMINAL.has(j.status) ? j.finished_at : undefined)),
  run_time: (j) => span(j.started_at, j.finished_at),
  error_class: (j) => retriesExhausted(j) || j.error_class || '',
};
const LIMITS = ['max_retry', 'retry_backoff', 'retry_backoff_max', 'pending_timeout', 'active_timeout', 'ttl_succeeded', 'ttl_failed'];
const POLL_MS = 2000;
// Beyond this many chunks the oldest are dropped, so a chatty job cannot
// exhaust the tab; the whole output stays available from the API.
const MAX_CHUNKS = 20000;

export async function mount(ctx) {
  const id = ctx.id;
  const base = `/api/v1/jobs/${encodeURIComponent(id)}`;
  const job = await ctx.api.get(base, {signal: ctx.signal}).catch((err) => {
    if (err.status === 404) err.message = `No job ${id}: ${err.message}`;
    throw err;
  });

  const fields = fieldList();
  const limits = h('tbody', {});
  const resources = h('div', {'data-testid': 'job-resources', class: 'resources'});
  const resourcesCard = h('section', {class: 'card resources-card', 'aria-labelledby': 'h-resources', hidden: true},
    h('h2', {id: 'h-resources'}, 'Remote resources'), resources);
  const health = h('div', {'data-testid': 'agent-health', class: 'agent-health', role: 'alert', hidden: true});
  const timeline = h('ol', {'data-testid': 'job-timeline', class: 'timeline'});
  const chart = h('div', {'data-testid': 'timeline-chart', class: 'chart'});
  const attempts = h('tbody', {});
  const logs = logView(ctx, base, id);
  const actions = actionForms(ctx, base, () => refresh());
  const heading = h('h1', {}, 'Job ', h('span', {class: 'mono'}, id));

  ctx.root.append(
    h('p', {class: 'crumbs'}, h('a', {href: '#/jobs'}, '← Jobs')),
    heading,
    health,
    resourcesCard,
    h('div', {class: 'job-grid'},
      h('section', {class: 'card', 'aria-labelledby': 'h-fields'}, h('h2', {id: 'h-fields'}, 'Details'), fields.el),
      h('section', {class: 'card', 'aria-labelledby': 'h-actions'}, h('h2', {id: 'h-actions'}, 'Actions'), actions.el),
      h('section', {class: 'card', 'aria-labelledby': 'h-limits'}, h('h2', {id: 'h-limits'}, 'Limits'),
        h('table', {'data-testid': 'job-limits', class: 'kv'},
          h('caption', {class: 'visually-hidden'}, 'Limits stamped at submit'), limits))),
    h('section', {class: 'card', 'aria-labelledby': 'h-attempts'}, h('h2', {id: 'h-attempts'}, 'Attempts'),
      tableWrap('Attempts', h('table', {'data-testid': 'job-attempts'},
        h('caption', {class: 'visually-hidden'}, 'Each attempt, one row per agent that held it'),
        head('Attempt', 'Agent', 'Lease', 'Started', 'Ended', 'Duration', 'Outcome', 'Error'), attempts))),
    h('section', {class: 'card', 'aria-labelledby': 'h-logs'}, h('h2', {id: 'h-logs'}, 'Output'), logs.el),
    h('section', {class: 'card', 'aria-labelledby': 'h-timeline'}, h('h2', {id: 'h-timeline'}, 'Timeline'), chart, timeline));

  let events = [];
  let polling = false;

  function show(j) {
    fields.update(j);
    replace(limits, LIMITS.map((k) => h('tr', {}, h('th', {scope: 'row'}, k), h('td', {}, String(j.limits?.[k] ?? '')))));
    resourcesCard.hidden = !(j.resources || []).length;
    renderResources(resources, j.resources || []);
    actions.show(j);
  }

  // extras are the attempts and, while an agent holds the job, its health.
  async function extras(j) {
    const [list, agents] = await Promise.all([
      ctx.api.get(`${base}/attempts`, {signal: ctx.signal}),
      j.agent ? ctx.api.get('/api/v1/agents?all=true', {signal: ctx.signal}) : null,
    ]);
    renderAttempts(attempts, list.attempts);
    renderHealth(health, j, agents ? agents.agents.find((a) => a.name === j.agent) : null);
  }

  async function fetchEvents() {
    const after = events.length ? events.at(-1).id : '';
    const data = await ctx.api.get(`${base}/events${query({after})}`, {signal: ctx.signal});
    if (data.events.length) {
      appendEvents(timeline, events, data.events);
      events = events.concat(data.events);
    }
  }

  async function refresh() {
    try {
      const j = await ctx.api.get(base, {signal: ctx.signal});
      show(j);
      await fetchEvents();
      await extras(j);
      renderChart(chart, events, j);
      ctx.clearError();
      if (!TERMINAL.has(j.status)) {
        poll();
        logs.start();
      }
      return j;
    } catch (err) {
      if (isAbort(err) || err.status === 401) return undefined;
      ctx.showError(err);
      return undefined;
    }
  }

  // poll re-fetches until the job is finished, then once more.
  async function poll() {
    if (polling) return;
    polling = true;
    try {
      while (!ctx.signal.aborted) {
        await sleep(POLL_MS, ctx.signal);
        if (ctx.signal.aborted) return;
        const j = await refresh();
        if (j && TERMINAL.has(j.status)) return;
      }
    } finally {
      polling = false;
    }
  }

  show(job);
  await fetchEvents();
  await extras(job);
  renderChart(chart, events, job);
  logs.start();
  if (!TERMINAL.has(job.status)) poll();
  ctx.ready();
}

function fieldList() {
  const dds = new Map();
  const el = h('dl', {class: 'fields'}, FIELDS.map(([key, label]) => {
    const dd = h('dd', {'data-field': key});
    dds.set(key, dd);
    return h('div', {class: `field-row row-${key}`}, h('dt', {}, label), dd);
  }));
  return {
    el,
    update(j) {
      for (const [key, dd] of dds) {
        const v = DERIVED[key] ? DERIVED[key](j) : j[key];
        let content;
        if (key === 'status') content = statusBadge(v);
        else if (TIMES.has(key)) content = timeEl(v);
        else if (key === 'result' || key === 'context') content = v === undefined ? '' : h('pre', {}, JSON.stringify(v, null, 2));
        else if (v === undefined || v === null || v === '' || v === false) content = '';
        else content = String(v);
        const text = content instanceof Node ? content.textContent : content;
        if (dd.textContent !== text) replace(dd, content);
      }
    },
  };
}

// logView follows the job's NDJSON log, resuming after the last seq when
// the stream is cut without an end record (agent gone, draining).
function logView(ctx, base, id) {
  const out = h('div', {'data-testid': 'job-logs', class: 'logs', tabindex: '0', role: 'log', 'aria-label': 'Job output'});
  const status = h('span', {'data-testid': 'logs-status', 'aria-live': 'polite', class: 'logs-status'}, 'connecting');
  const toggle = (name, label, checked, change) => {
    const box = h('input', {type: 'checkbox', id: `logs-${name}`, checked, on: {change: () => change(box.checked)}});
    return h('span', {class: 'check'}, box, h('label', {for: `logs-${name}`}, label));
  };
  const find = logSearch(out);
  const el = h('div', {},
    h('div', {class: 'logs-bar'},
      toggle('stdout', 'stdout', true, (on) => out.classList.toggle('hide-stdout', !on)),
      toggle('stderr', 'stderr', true, (on) => out.classList.toggle('hide-stderr', !on)),
      toggle('times', 'times (when the agent received each line)', false, (on) => out.classList.toggle('show-times', on)),
      h('span', {class: 'muted'}, 'Log: '), status),
    h('div', {class: 'logs-bar'}, find.el, downloadButton(ctx, base, id)),
    out);

  // Every line of one stored chunk carries the chunk's seq, and a stream can
  // be cut between two lines of a chunk. So the cursor is the last chunk
  // known complete (doneSeq: a later seq has arrived after it); a reconnect
  // asks for what follows it and skips the lines of the next chunk
  // (curSeq) already shown (curLines), counting them per connection.
  let doneSeq = 0;
  let curSeq = 0;
  let curLines = 0;
  let connSeq = 0;
  let connLines = 0;
  let lastAttempt = null;
  let chunks = 0;
  let running = false;
  const partial = {stdout: false, stderr: false}; // the stream's last chunk had no newline

  function shown(r) {
    if (r.seq === connSeq) connLines++;
    else { connSeq = r.seq; connLines = 1; }
    if (r.seq <= doneSeq || (r.seq === curSeq && connLines <= curLines)) return true;
    if (r.seq !== curSeq) {
      doneSeq = curSeq;
      curSeq = r.seq;
      curLines = 0;
    }
    curLines++;
    return false;
  }

  function append(records) {
    const atBottom = out.scrollHeight - out.scrollTop - out.clientHeight < 32;
    const frag = document.createDocumentFragment();
    for (const r of records) {
      if (shown(r)) continue; // already shown before a reconnect
      if (r.attempt !== lastAttempt) {
        frag.append(h('div', {'data-testid': 'attempt-sep', class: 'attempt-sep', 'data-attempt': r.attempt}, `attempt ${r.attempt}`));
        lastAttempt = r.attempt;
      }
      // The time is the chunk's, when the agent received it (the job's
      // output carries none); it is drawn before each line's first chunk.
      const chunk = h('span', {class: r.partial ? 'log-chunk partial' : 'log-chunk', title: `received ${r.time}`,
        'data-seq': r.seq, 'data-stream': r.stream, 'data-attempt': r.attempt,
        'data-time': partial[r.stream] ? false : `${formatTime(r.time, timeMode() === 'local' ? 'local' : 'utc')} `}, r.line);
      partial[r.stream] = r.partial;
      find.mark(chunk);
      frag.append(chunk);
      chunks++;
    }
    out.append(frag);
    while (chunks > MAX_CHUNKS && out.firstChild) {
      if (out.firstChild.classList?.contains('log-chunk')) chunks--;
      out.firstChild.remove();
    }
    if (atBottom) out.scrollTop = out.scrollHeight;
    find.count();
  }

  // read consumes one response; it answers the end record, or null when
  // the stream was cut.
  async function read(resp, onData) {
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const {done, value} = await reader.read();
      if (done) return null;
      buf += decoder.decode(value, {stream: true});
      const lines = buf.split('\n');
      buf = lines.pop();
      const records = [];
      for (const line of lines) {
        if (!line.trim()) continue;
        const rec = JSON.parse(line);
        if (rec.end) {
          append(records);
          return rec;
        }
        records.push(rec);
      }
      if (records.length) {
        append(records);
        onData();
      }
    }
  }

  async function follow() {
    let backoff = 500;
    while (!ctx.signal.aborted) {
      let end = null;
      try {
        connSeq = 0;
        connLines = 0;
        const resp = await ctx.api.open(`${base}/logs${query({format: 'jsonl', follow: 'true', after: doneSeq || ''})}`,
          {signal: ctx.signal});
        status.textContent = 'following';
        end = await read(resp, () => { backoff = 500; });
      } catch (err) {
        if (isAbort(err) || err.status === 401) return;
        if (err.status === 404) {
          status.textContent = `ended: ${err.message}`;
          return;
        }
        // Anything else (network, 5xx, a cut mid-line): reconnect below.
      }
      if (end) {
        status.textContent = `ended: ${end.status}`;
        return;
      }
      status.textContent = `reconnecting… (in ${duration(backoff / 1000)})`;
      await sleep(backoff, ctx.signal);
      backoff = Math.min(backoff * 2, 5000);
    }
  }

  return {
    el,
    // start follows unless already following (again after a requeue).
    start() {
      if (running) return;
      running = true;
      follow().finally(() => { running = false; });
    },
  };
}

// logSearch finds text in the lines on the page: every matching chunk is
// marked, Next / Previous move to one, and lines arriving are matched too.
function logSearch(out) {
  const input = h('input', {type: 'search', id: 'logs-search', 'data-testid': 'logs-search', autocomplete: 'off',
    placeholder: 'text in the output', on: {input: () => run()}});
  const found = h('span', {'data-testid': 'logs-found', 'aria-live': 'polite', class: 'muted'});
  const step = (d, label) => h('button', {type: 'button', class: 'small', 'data-testid': `logs-find-${label.toLowerCase()}`,
    on: {click: () => move(d)}}, label);
  let needle = '';
  let current = null;

  const matches = () => [...out.querySelectorAll('.log-chunk.match')];
  function mark(chunk) {
    chunk.classList.toggle('match', needle !== '' && chunk.textContent.toLowerCase().includes(needle));
  }
  function count() {
    if (!needle) {
      found.textContent = '';
      return;
    }
    const m = matches();
    const at = m.indexOf(current);
    found.textContent = m.length ? `${at >= 0 ? `${at + 1} of ` : ''}${m.length} matching line${m.length === 1 ? '' : 's'}` : 'no match';
  }
  function move(d) {
    const m = matches();
    if (!m.length) return;
    const at = m.indexOf(current);
    current?.classList.remove('match-current');
    current = m[at < 0 ? (d > 0 ? 0 : m.length - 1) : (at + d + m.length) % m.length];
    current.classList.add('match-current');
    current.scrollIntoView({block: 'nearest'});
    count();
  }
  function run() {
    needle = input.value.trim().toLowerCase();
    current?.classList.remove('match-current');
    current = null;
    for (const chunk of out.querySelectorAll('.log-chunk')) mark(chunk);
    if (needle) move(1);
    count();
  }
  return {
    el: h('span', {class: 'logs-find', role: 'search'},
      h('label', {for: 'logs-search'}, 'Find in output'), input, step(-1, 'Previous'), step(1, 'Next'), found),
    mark, count,
  };
}

// downloadButton saves the whole stored log (GET .../logs?download=true,
// with the token, so not a plain link) under the API's file name.
function downloadButton(ctx, base, id) {
  const note = h('span', {'data-testid': 'logs-download-status', class: 'muted', 'aria-live': 'polite'});
  const btn = h('button', {type: 'button', class: 'small', 'data-testid': 'logs-download', on: {click: save}}, 'Download whole log');
  async function save() {
    btn.disabled = true;
    note.textContent = 'downloading…';
    try {
      const resp = await ctx.api.open(`${base}/logs?download=true`, {signal: ctx.signal});
      const name = /filename="([^"]+)"/.exec(resp.headers.get('Content-Disposition') || '')?.[1] || `tether-job-${id}.log`;
      const blob = await resp.blob();
      const url = URL.createObjectURL(blob);
      const a = h('a', {href: url, download: name, hidden: true});
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      note.textContent = `saved ${name} (${blob.size} bytes)`;
    } catch (err) {
      if (isAbort(err) || err.status === 401) return;
      note.textContent = `download failed: ${err.message}`;
    } finally {
      btn.disabled = false;
    }
  }
  return h('span', {}, btn, ' ', note);
}

function eventMessage(ev) {
  if (ev.kind === 'remote' && ev.message) {
    try {
      const m = JSON.parse(ev.message);
      const names = (m.resources || []).map((r) => r.label || r.name).join(', ');
      return `attempt ${m.attempt}: ${names}`;
    } catch {
      // not JSON: show it as it is
    }
  }
  return ev.message || '';
}

function appendEvents(ol, before, added) {
  let prev = before.at(-1);
  for (const ev of added) {
    const since = prev ? duration(between(prev.at, ev.at)) : '';
    ol.append(h('li', {'data-kind': ev.kind, 'data-event-id': ev.id, class: `event event-${ev.kind}`},
      h('span', {class: 'event-time'}, timeEl(ev.at)),
      h('span', {class: 'event-delta', title: 'since the previous event'}, since ? `+${since}` : 'start'),
      h('strong', {class: 'event-kind'}, ev.kind),
      ev.agent ? h('span', {class: 'event-agent'}, `agent ${ev.agent}`) : '',
      ev.lease ? h('span', {class: 'event-lease'}, `lease ${ev.lease}`) : '',
      ev.message ? h('span', {class: 'event-message'}, eventMessage(ev)) : ''));
    prev = ev;
  }
}

// The phase a job is in after an event of each kind; other kinds keep it.
const PHASE_AFTER = {
  submitted: 'queued', requeued: 'queued', retry_scheduled: 'queued', released: 'queued', lease_lost: 'queued',
  claimed: 'accepted', running: 'running', resumed: 'running', cancel_requested: 'canceling',
  succeeded: 'end', failed: 'end', canceled: 'end',
};

// renderChart draws the job's phases along time as one SVG bar, with a
// text legend of the time spent in each (the chart is not color-only).
function renderChart(el, events, job) {
  if (!events.length) {
    replace(el);
    return;
  }
  const segments = [];
  let phase = null;
  let from = null;
  for (const ev of events) {
    const next = PHASE_AFTER[ev.kind] || phase;
    if (next !== phase) {
      if (phase && phase !== 'end') segments.push({phase, from, to: ev.at});
      phase = next;
      from = ev.at;
    }
  }
  if (phase && phase !== 'end') segments.push({phase, from, to: TERMINAL.has(job.status) ? (job.finished_at || from) : null});
  const start = Date.parse(events[0].at);
  const endT = Math.max(...segments.map((sg) => (sg.to ? Date.parse(sg.to) : Date.now())), start + 1);
  const span = endT - start;
  const totals = new Map();
  const rects = segments.map((sg) => {
    const t0 = Date.parse(sg.from);
    const t1 = sg.to ? Date.parse(sg.to) : Date.now();
    totals.set(sg.phase, (totals.get(sg.phase) || 0) + (t1 - t0) / 1000);
    const x = ((t0 - start) / span) * 1000;
    const w = Math.max(((t1 - t0) / span) * 1000, 2);
    return s('rect', {x: x.toFixed(1), y: 0, width: w.toFixed(1), height: 20, class: `phase phase-${sg.phase}`},
      s('title', {}, `${sg.phase} ${duration((t1 - t0) / 1000)}`));
  });
  replace(el,
    s('svg', {viewBox: '0 0 1000 20', preserveAspectRatio: 'none', role: 'img',
      'aria-label': `Phases over ${duration(span / 1000)}`, class: 'chart-svg'}, rects),
    h('ul', {class: 'legend'}, [...totals].map(([ph, secs]) =>
      h('li', {}, h('span', {class: `swatch phase-${ph}`, 'aria-hidden': 'true'}), `${ph} ${duration(secs)}`))));
}

// renderAttempts fills the attempts table: one row per agent that held an
// attempt (GET .../attempts), the open one timed so far.
function renderAttempts(tbody, list) {
  replace(tbody, list.length ? list.map((a) => h('tr', {'data-attempt': a.attempt, 'data-outcome': a.outcome},
    h('td', {class: 'num'}, String(a.attempt)),
    h('td', {}, a.agent || ''),
    h('td', {class: 'num'}, a.lease ? String(a.lease) : ''),
    h('td', {}, timeEl(a.started_at)),
    h('td', {}, a.ended_at ? timeEl(a.ended_at) : 'holding'),
    h('td', {class: 'num', 'data-col': 'duration'}, span(a.started_at, a.ended_at)),
    h('td', {'data-col': 'outcome'}, a.outcome),
    h('td', {'data-col': 'error', class: 'error-text'}, a.error || '')))
    : h('tr', {}, h('td', {colspan: 8, class: 'muted'}, 'No agent has claimed it yet.')));
}

// renderHealth says when the agent holding the job is not heartbeating as
// it should (late, stale, dead: frozen, cut off or gone), by the fleet's
// rule the agents page shows.
function renderHealth(el, job, agent) {
  const ok = !job.agent || TERMINAL.has(job.status) || (agent && (agent.liveness === 'live' || agent.liveness === 'draining'));
  el.hidden = ok;
  if (ok) {
    el.removeAttribute('data-liveness');
    return;
  }
  el.dataset.liveness = agent ? agent.liveness : 'unknown';
  replace(el, agent
    ? [h('strong', {}, `Agent ${agent.name} is ${agent.liveness}`), `: ${agent.reason}. Silent for ${duration(agent.silent_seconds)}, last seen `,
      timeEl(agent.last_seen), '. ', h('a', {href: '#/agents?all=true'}, 'Agents')]
    : [h('strong', {}, `Agent ${job.agent} is not registered`), ': it holds this job but no agents row names it.']);
}

function renderResources(el, resources) {
  const key = JSON.stringify(resources);
  if (el.dataset.key === key) return; // unchanged: keep focus and selection
  el.dataset.key = key;
  if (!resources.length) {
    replace(el, h('p', {class: 'muted'}, 'None reported.'));
    return;
  }
  const byAttempt = new Map();
  for (const r of resources) byAttempt.set(r.attempt, [...(byAttempt.get(r.attempt) || []), r]);
  replace(el, [...byAttempt].map(([attempt, list]) => [
    h('h3', {}, `Attempt ${attempt}`),
    h('ul', {class: 'resource-list'}, list.map(resourceItem)),
  ]));
}

function resourceItem(r) {
  return h('li', {'data-resource-kind': r.kind},
    h('div', {}, h('strong', {}, r.label || r.kind), ' ', h('span', {class: 'muted'}, `(${r.kind})`)),
    h('div', {class: 'mono wrap'}, r.name),
    safeURL(r.url) ? h('div', {}, h('a', {href: r.url, rel: 'noopener noreferrer', target: '_blank'}, 'Open in console ↗')) : '',
    r.command ? h('div', {class: 'command'}, h('code', {}, r.command), copyButton(r.command)) : '');
}

// safeURL admits only web links: a plugin's url must not become a
// javascript: link.
function safeURL(url) {
  return /^https?:\/\//i.test(url || '');
}

function copyButton(text) {
  const btn = h('button', {type: 'button', class: 'small', on: {click: copy}}, 'Copy');
  async function copy() {
    try {
      await navigator.clipboard.writeText(text);
      btn.textContent = 'Copied';
    } catch {
      // No clipboard (not a secure context): select the text instead.
      const range = document.createRange();
      range.selectNodeContents(btn.previousElementSibling);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      btn.textContent = 'Selected: press Ctrl+C';
    }
  }
  return btn;
}

function actionForms(ctx, base, reload) {
  const ok = h('p', {'data-testid': 'action-ok', role: 'status', class: 'ok', hidden: true});
  const error = h('p', {'data-testid': 'action-error', role: 'alert', class: 'form-error', hidden: true});

  function form(testid, legend, fields, button, send, done) {
    const f = h('form', {'data-testid': testid, class: 'action', on: {submit}},
      h('fieldset', {}, h('legend', {}, legend), fields, button));
    async function submit(ev) {
      ev.preventDefault();
      clearFieldErrors(f);
      ok.hidden = true;
      error.hidden = true;
      button.disabled = true;
      try {
        const answer = await send(f.elements);
        ok.textContent = done(answer);
        ok.hidden = false;
        f.reset();
        await reload();
      } catch (err) {
        if (isAbort(err) || err.status === 401) return;
        const ids = Object.fromEntries([...f.querySelectorAll('input')].map((i) => [i.name, i.id]));
        if (!showFieldError(f, ids, err)) {
          error.textContent = err.message;
          error.hidden = false;
        }
      } finally {
        button.disabled = false;
      }
    }
    return f;
  }

  const cancel = form('cancel-form', 'Cancel',
    [field('Reason', {id: 'cancel-reason', name: 'reason', autocomplete: 'off'}, 'Optional; recorded in the timeline.')],
    h('button', {type: 'submit', 'data-testid': 'cancel-submit', class: 'danger'}, 'Cancel job'),
    (el) => ctx.api.post(`${base}/cancel`, el.reason.value ? {reason: el.reason.value} : {}, {signal: ctx.signal}),
    (j) => `Cancel requested; the job is ${j.status}.`);
  const requeue = form('requeue-form', 'Requeue as a new attempt',
    [field('Reason', {id: 'requeue-reason', name: 'reason', autocomplete: 'off'}, 'Required; audited in the timeline.'),
      field('Key', {id: 'requeue-key', name: 'key', autocomplete: 'off'}, 'Optional; the same key again does not requeue twice.')],
    h('button', {type: 'submit', 'data-testid': 'requeue-submit'}, 'Requeue job'),
    (el) => ctx.api.post(`${base}/requeue`,
      el.key.value ? {reason: el.reason.value, key: el.key.value} : {reason: el.reason.value}, {signal: ctx.signal}),
    (a) => (a.replayed ? `Already requeued with this key; the job is ${a.job.status}.` : `Requeued; the job is ${a.job.status}.`));

  const why = h('ul', {'data-testid': 'actions-why', class: 'muted actions-why'});
  return {
    el: h('div', {class: 'actions-box'}, cancel, requeue, why, ok, error),
    // show offers only the actions the job's status allows, and says why
    // the others are not there.
    show(j) {
      const allowed = allowedActions(j.status);
      cancel.hidden = !allowed.cancel;
      requeue.hidden = !allowed.requeue;
      replace(why, allowed.why.map((w) => h('li', {}, w)));
    },
  };
}

// allowedActions is what the API accepts for a job in status st, and why
// the others are refused (the API's rules: cancel an unfinished job,
// requeue a failed or canceled one).
export function allowedActions(st) {
  const out = {cancel: !TERMINAL.has(st) && st !== 'canceling', requeue: st === 'failed' || st === 'canceled', why: []};
  if (st === 'canceling') out.why.push('No Cancel: a cancel was already requested; the agent is stopping the job.');
  else if (!out.cancel) out.why.push(`No Cancel: the job is ${st}, and a finished job cannot be canceled.`);
  if (!out.requeue) out.why.push(`No Requeue: only failed or canceled jobs can be requeued; this one is ${st}.`);
  return out;
}
