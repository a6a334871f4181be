// Agents: live ones by default (all=true in the hash adds stopped and
// stale ones), each not plainly live marked with its liveness (late, stale,
// dead, stopped) and the reason as its title, refreshed every 3 s. A
// running agent can be asked to drain (as `tether agent drain` does): the
// Drain button opens a confirmation below the table, which says what a
// drain does and takes a reason; the request then shows in the agent's row.

import {isAbort} from './api.js';
import {h, timeEl, duration, syncRows, tableWrap, head, every, field, showFieldError, clearFieldErrors} from './dom.js';

export async function mount(ctx) {
  const all = ctx.params.get('all') === 'true';
  const box = h('input', {type: 'checkbox', id: 'agents-all', checked: all,
    on: {change: () => ctx.navigate(box.checked ? '#/agents?all=true' : '#/agents')}});
  const tbody = h('tbody', {});
  const empty = h('p', {class: 'empty', hidden: true}, all ? 'No agents have registered.' : 'No live agents.');
  const latest = new Map(); // name -> the agent as last loaded
  const drain = drainForm(ctx, load, (name) => latest.get(name));
  ctx.root.append(
    h('h1', {}, 'Agents'),
    h('p', {class: 'check'}, box, h('label', {for: 'agents-all'}, 'Show stopped and stale agents too')),
    tableWrap('Agents', h('table', {'data-testid': 'agents-table'},
      h('caption', {class: 'visually-hidden'}, 'Agents'),
      head('Name', 'Generation', 'State', 'Load', 'Commands', 'Last seen', 'Version', 'Started', 'Actions'),
      tbody)),
    empty,
    drain.el);

  async function load() {
    try {
      const data = await ctx.api.get(`/api/v1/agents${all ? '?all=true' : ''}`, {signal: ctx.signal});
      latest.clear();
      for (const a of data.agents) latest.set(a.name, a);
      syncRows(tbody, data.agents, (a) => `${a.name}/${a.generation}`, (a) => row(a, drain.ask));
      empty.hidden = data.agents.length > 0;
      ctx.clearError();
    } catch (err) {
      if (isAbort(err) || err.status === 401) return;
      ctx.showError(err);
    }
    ctx.ready();
  }
  await load();
  every(3000, ctx.signal, load);
}

// drainForm is the confirmation of a drain: hidden until ask(name) names
// the agent (agentNamed gives its latest row); its submit sends POST
// /api/v1/agents/{name}/drain.
function drainForm(ctx, reload, agentNamed) {
  const ok = h('p', {'data-testid': 'drain-ok', role: 'status', class: 'ok', hidden: true});
  const error = h('p', {'data-testid': 'drain-error', role: 'alert', class: 'form-error', hidden: true});
  const legend = h('legend', {});
  const what = h('p', {class: 'hint'});
  const submitBtn = h('button', {type: 'submit', class: 'danger', 'data-testid': 'drain-confirm'}, 'Drain agent');
  const keep = h('button', {type: 'button', 'data-testid': 'drain-keep', on: {click: close}}, 'Keep it running');
  const form = h('form', {'data-testid': 'drain-form', class: 'action', hidden: true, on: {submit}},
    h('fieldset', {}, legend, what,
      field('Reason', {id: 'drain-reason', autocomplete: 'off'}, 'Optional; stored with the request and shown here.'),
      h('div', {class: 'buttons'}, submitBtn, ' ', keep)));
  let agent = null;

  function ask(name) {
    const a = agentNamed(name) || {name, active_jobs: 0};
    agent = a.name;
    legend.textContent = `Drain agent ${a.name}?`;
    what.textContent = `It claims no more jobs, hands its ${a.active_jobs} running job(s) to other agents ` +
      'or stops them, exactly as on SIGTERM, then exits. It reads the request at its next heartbeat.';
    form.reset();
    clearFieldErrors(form);
    ok.hidden = true;
    error.hidden = true;
    form.hidden = false;
    form.querySelector('#drain-reason').focus();
  }
  function close() {
    form.hidden = true;
    agent = null;
  }
  async function submit(ev) {
    ev.preventDefault();
    if (!agent) return;
    clearFieldErrors(form);
    submitBtn.disabled = true;
    const reason = form.elements['drain-reason'].value;
    try {
      const answer = await ctx.api.post(`/api/v1/agents/${encodeURIComponent(agent)}/drain`,
        reason ? {reason} : {}, {signal: ctx.signal});
      ok.textContent = answer.requested
        ? `Drain requested; agent ${agent} drains at its next heartbeat.`
        : `A drain of agent ${agent} was already requested; it stands.`;
      ok.hidden = false;
      close();
      await reload();
    } catch (err) {
      if (isAbort(err) || err.status === 401) return;
      if (!showFieldError(form, {reason: 'drain-reason'}, err)) {
        error.textContent = err.message;
        error.hidden = false;
      }
    } finally {
      submitBtn.disabled = false;
    }
  }
  return {el: h('div', {class: 'actions-box'}, form, ok, error), ask};
}

// unhealthyNote names the plugins whose health check fails on the agent,
// each with its error as the title. Their commands are not claimed there.
function unhealthyNote(plugins) {
  const names = Object.keys(plugins || {}).sort();
  if (names.length === 0) return '';
  return h('span', {'data-testid': 'unhealthy-plugins'}, ...names.map((p) =>
    h('span', {class: 'badge badge-stale', title: plugins[p]}, `${p} unhealthy`)));
}

// drainNote shows an operator's drain request: who asked, when and why.
function drainNote(req) {
  if (!req) return '';
  const why = req.reason ? `: ${req.reason}` : '';
  return h('span', {class: 'badge badge-late', 'data-testid': 'drain-request',
    title: `requested by ${req.by || 'someone'} at ${req.at}${why}`}, 'drain requested');
}

// drainButton is offered on a running agent no drain was asked of.
function drainButton(a, ask) {
  if (a.state !== 'running' || a.drain_request) return '';
  return h('button', {type: 'button', 'data-drain': a.name, 'aria-label': `Drain agent ${a.name}`,
    on: {click: () => ask(a.name)}}, 'Drain…');
}

// The liveness badge is the fleet's rule, the one the janitor acts by
// (docs/operations.md, "Who is alive"); its title is the reason.
function row(a, ask) {
  const quiet = !a.live;
  const badge = a.liveness && a.liveness !== 'live' && a.liveness !== 'draining'
    ? h('span', {class: `badge badge-${a.live ? 'late' : 'stale'}`, title: a.reason, 'data-liveness': a.liveness}, a.liveness) : '';
  return h('tr', {'data-agent': a.name, 'data-live': String(a.live), 'data-liveness': a.liveness, 'data-state': a.state,
    title: a.reason, class: quiet ? 'stale' : ''},
    h('td', {}, h('span', {class: 'mono'}, a.name), badge),
    h('td', {class: 'mono'}, a.generation),
    h('td', {}, h('span', {class: `state state-${a.state}`}, a.state), ' ', drainNote(a.drain_request)),
    h('td', {class: 'num'}, `${a.active_jobs}/${a.capacity}`),
    h('td', {}, (a.commands || []).join(', '), unhealthyNote(a.unhealthy_plugins)),
    h('td', {}, `${duration(a.silent_seconds)} ago`, ' ', h('span', {class: 'muted'}, '(', timeEl(a.last_seen), ')')),
    h('td', {}, a.version),
    h('td', {}, timeEl(a.started_at)),
    h('td', {}, drainButton(a, ask)));
}
