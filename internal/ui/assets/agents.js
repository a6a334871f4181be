// Agents: live ones by default (all=true in the hash adds stopped and
// stale ones), each not plainly live marked with its liveness (late, stale,
// dead, stopped) and the reason as its title, refreshed every 3 s.

import {isAbort} from './api.js';
import {h, timeEl, duration, syncRows, tableWrap, head, every} from './dom.js';

export async function mount(ctx) {
  const all = ctx.params.get('all') === 'true';
  const box = h('input', {type: 'checkbox', id: 'agents-all', checked: all,
    on: {change: () => ctx.navigate(box.checked ? '#/agents?all=true' : '#/agents')}});
  const tbody = h('tbody', {});
  const empty = h('p', {class: 'empty', hidden: true}, all ? 'No agents have registered.' : 'No live agents.');
  ctx.root.append(
    h('h1', {}, 'Agents'),
    h('p', {class: 'check'}, box, h('label', {for: 'agents-all'}, 'Show stopped and stale agents too')),
    tableWrap('Agents', h('table', {'data-testid': 'agents-table'},
      h('caption', {class: 'visually-hidden'}, 'Agents'),
      head('Name', 'Generation', 'State', 'Load', 'Commands', 'Last seen', 'Version', 'Started'),
      tbody)),
    empty);

  async function load() {
    try {
      const data = await ctx.api.get(`/api/v1/agents${all ? '?all=true' : ''}`, {signal: ctx.signal});
      syncRows(tbody, data.agents, (a) => `${a.name}/${a.generation}`, row);
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

// unhealthyNote names the plugins whose health check fails on the agent,
// each with its error as the title. Their commands are not claimed there.
function unhealthyNote(plugins) {
  const names = Object.keys(plugins || {}).sort();
  if (names.length === 0) return '';
  return h('span', {'data-testid': 'unhealthy-plugins'}, ...names.map((p) =>
    h('span', {class: 'badge badge-stale', title: plugins[p]}, `${p} unhealthy`)));
}

// The liveness badge is the fleet's rule, the one the janitor acts by
// (docs/operations.md, "Who is alive"); its title is the reason.
function row(a) {
  const quiet = !a.live;
  const badge = a.liveness && a.liveness !== 'live' && a.liveness !== 'draining'
    ? h('span', {class: `badge badge-${a.live ? 'late' : 'stale'}`, title: a.reason, 'data-liveness': a.liveness}, a.liveness) : '';
  return h('tr', {'data-agent': a.name, 'data-live': String(a.live), 'data-liveness': a.liveness, title: a.reason, class: quiet ? 'stale' : ''},
    h('td', {}, h('span', {class: 'mono'}, a.name), badge),
    h('td', {class: 'mono'}, a.generation),
    h('td', {}, h('span', {class: `state state-${a.state}`}, a.state)),
    h('td', {class: 'num'}, `${a.active_jobs}/${a.capacity}`),
    h('td', {}, (a.commands || []).join(', '), unhealthyNote(a.unhealthy_plugins)),
    h('td', {}, `${duration(a.silent_seconds)} ago`, ' ', h('span', {class: 'muted'}, '(', timeEl(a.last_seen), ')')),
    h('td', {}, a.version),
    h('td', {}, timeEl(a.started_at)));
}
