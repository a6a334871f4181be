// Commands: every known command, who serves it and what waits for it;
// a command no live agent serves is marked with the API's hint.

import {isAbort} from './api.js';
import {h, duration, syncRows, tableWrap, head, every} from './dom.js';

export async function mount(ctx) {
  const tbody = h('tbody', {});
  ctx.root.append(
    h('h1', {}, 'Commands'),
    tableWrap('Commands', h('table', {'data-testid': 'commands-table'},
      h('caption', {class: 'visually-hidden'}, 'Commands'),
      head('Command', 'Plugin', 'Served', 'Agents', 'Draining', 'Unhealthy', 'Queued', 'Oldest queued', 'Configured here'),
      tbody)));

  async function load() {
    try {
      const data = await ctx.api.get('/api/v1/commands', {signal: ctx.signal});
      syncRows(tbody, data.commands, (c) => c.name, row);
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

function row(c) {
  return h('tr', {'data-command': c.name, 'data-served': String(c.served), class: c.served ? '' : 'unserved'},
    h('th', {scope: 'row'}, h('a', {href: `#/jobs?command=${encodeURIComponent(c.name)}`}, c.name)),
    h('td', {}, c.plugin),
    h('td', {}, c.served ? 'yes'
      : [h('span', {class: 'badge badge-stale'}, 'not served'), c.hint ? h('span', {class: 'hint-text'}, c.hint) : '']),
    h('td', {}, (c.agents || []).join(', ')),
    h('td', {}, (c.draining || []).join(', ')),
    h('td', {'data-testid': 'unhealthy', title: (c.unhealthy || []).length ? 'its plugin fails its health check there: they claim none of its jobs' : ''},
      (c.unhealthy || []).join(', ')),
    h('td', {class: 'num'}, String(c.queued)),
    h('td', {class: 'num'}, c.oldest_queued_seconds == null ? '' : duration(c.oldest_queued_seconds)),
    h('td', {}, c.configured ? 'yes' : 'no'));
}
