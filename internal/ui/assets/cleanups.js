// Cleanups: pending plugin Cleanup calls with their attempts and last
// error, a page at a time, refreshed every 3 s.

import {query, isAbort} from './api.js';
import {h, timeEl, syncRows, tableWrap, head, every} from './dom.js';

const PAGE = 50;

export async function mount(ctx) {
  const tbody = h('tbody', {});
  const empty = h('p', {class: 'empty', hidden: true}, 'No cleanups pending.');
  const first = h('button', {type: 'button', 'data-testid': 'cleanups-first', on: {click: () => go([], '')}}, 'First page');
  const next = h('button', {type: 'button', 'data-testid': 'cleanups-next', on: {click: () => go([...stack, after], nextCursor)}}, 'Next');
  ctx.root.append(
    h('h1', {}, 'Cleanups'),
    h('p', {class: 'muted'}, 'Plugin Cleanup calls still to be made for finished or lost attempts; the janitor retries them with backoff.'),
    tableWrap('Cleanups', h('table', {'data-testid': 'cleanups-table'},
      h('caption', {class: 'visually-hidden'}, 'Pending cleanups'),
      head('Job', 'Command', 'Plugin', 'Reason', 'Attempts', 'Next attempt', 'Last error', 'Claimed by', 'Created'),
      tbody)),
    empty,
    h('nav', {class: 'pager', 'aria-label': 'Pages'}, first, next));

  let stack = [];
  let after = '';
  let nextCursor = '';

  async function load() {
    try {
      const data = await ctx.api.get(`/api/v1/cleanups${query({limit: PAGE, after})}`, {signal: ctx.signal});
      nextCursor = data.next || '';
      syncRows(tbody, data.cleanups, (c) => c.job_id, row);
      empty.hidden = data.cleanups.length > 0;
      next.disabled = !nextCursor;
      first.disabled = after === '';
      ctx.clearError();
    } catch (err) {
      if (isAbort(err) || err.status === 401) return;
      ctx.showError(err);
    }
    ctx.ready();
  }

  async function go(newStack, cursor) {
    stack = newStack;
    after = cursor || '';
    await load();
  }

  await load();
  every(3000, ctx.signal, load);
}

function row(c) {
  return h('tr', {'data-job-id': c.job_id},
    h('td', {}, h('a', {href: `#/jobs/${c.job_id}`, class: 'mono'}, c.job_id)),
    h('td', {}, c.command),
    h('td', {}, c.plugin),
    h('td', {}, c.reason),
    h('td', {class: 'num'}, String(c.attempts)),
    h('td', {}, timeEl(c.next_at)),
    h('td', {class: 'error-text'}, c.last_error || ''),
    h('td', {}, c.claimed_by ? [c.claimed_by, ' until ', timeEl(c.claimed_until)] : ''),
    h('td', {}, timeEl(c.created_at)));
}
