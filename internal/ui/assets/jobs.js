// Jobs list: counts per status, filters kept in the hash, keyset pages (a
// stack of cursors for "previous"), refreshed in place every 3 s, and bulk
// cancel / requeue of the selected rows.

import {query, isAbort} from './api.js';
import {h, replace, timeEl, span, statusBadge, syncRows, tableWrap, every,
  field, showFieldError, clearFieldErrors} from './dom.js';
import {bulkActions} from './bulk.js';
import {failureReason} from './reason.js';

const STATUSES = ['queued', 'accepted', 'running', 'canceling', 'succeeded', 'failed', 'canceled'];
const FILTERS = ['status', 'command', 'submitter', 'agent', 'since', 'until', 'key'];
// The filters a count honours (the list's, but status and key).
const COUNT_FILTERS = ['command', 'submitter', 'agent', 'since', 'until'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// The API's query parameter (an error's field) → the input showing it.
const FIELD_IDS = {
  status: 'filter-status', command: 'filter-command', submitter: 'filter-submitter', agent: 'filter-agent',
  since: 'filter-since', until: 'filter-until', idempotency_key: 'filter-key',
};
const PAGE = 50;
const REASON_MAX = 140;
// The counts are asked for on load and then every 15 s, not on every 3 s
// refresh: a count reads up to 10,000 rows per part (docs/api.md).
const COUNTS_MS = 15000;

export async function mount(ctx) {
  const filters = Object.fromEntries(FILTERS.map((k) => [k, ctx.params.get(k) || '']));
  const filterForm = filtersForm(filters, (values) => ctx.navigate(`#/jobs${query(values)}`));
  const searchForm = searchBox(ctx, filters);
  const tbody = h('tbody', {});
  const bulk = bulkActions(ctx, filters, () => load());
  const table = h('table', {'data-testid': 'jobs-table', class: 'jobs'},
    h('caption', {class: 'visually-hidden'}, 'Jobs, newest first'),
    h('thead', {}, h('tr', {},
      h('th', {scope: 'col'}, bulk.selectAll),
      ['ID', 'Status', 'Reason', 'Command', 'Submitter', 'Attempt', 'Created', 'Duration', 'Agent'].map((n) => h('th', {scope: 'col'}, n)))),
    tbody);
  const counts = h('nav', {'data-testid': 'job-counts', class: 'counts', 'aria-label': 'Jobs per status'});
  const empty = h('p', {class: 'empty', hidden: true}, 'No jobs match.');
  const refreshed = h('span', {'data-testid': 'jobs-refreshed', 'aria-live': 'polite'});
  const auto = h('input', {type: 'checkbox', id: 'auto-refresh', checked: true});
  const first = h('button', {type: 'button', 'data-testid': 'jobs-first', on: {click: () => go([], '')}}, 'First page');
  const prev = h('button', {type: 'button', 'data-testid': 'jobs-prev', on: {click: () => go(stack.slice(0, -1), stack.at(-1))}}, 'Previous');
  const next = h('button', {type: 'button', 'data-testid': 'jobs-next', on: {click: () => go([...stack, after], nextCursor)}}, 'Next');
  const pageLabel = h('span', {class: 'page-label'});

  ctx.root.append(
    h('h1', {}, 'Jobs'),
    counts,
    h('div', {class: 'toolbar'}, searchForm,
      // Folded on a phone unless a filter is set, so the table is in view.
      h('details', {class: 'filters-box', open: wide() || FILTERS.some((k) => filters[k])},
        h('summary', {}, 'Filters'), filterForm)),
    h('div', {class: 'refresh'},
      h('span', {class: 'check'}, auto, h('label', {for: 'auto-refresh'}, 'Auto-refresh every 3 s')),
      h('span', {class: 'nowrap'}, h('span', {class: 'muted'}, 'Last refresh: '), refreshed)),
    bulk.el,
    tableWrap('Jobs', table),
    empty,
    h('nav', {class: 'pager', 'aria-label': 'Pages'}, first, prev, pageLabel, next));

  // Page state: after is the cursor of the shown page, stack the cursors
  // of the pages before it, nextCursor the API's next.
  let stack = [];
  let after = '';
  let nextCursor = '';
  let countedAt = 0; // when the counts were last asked for (ms)

  async function load() {
    const params = {
      status: filters.status, command: filters.command, submitter: filters.submitter, agent: filters.agent,
      since: filters.since, until: filters.until, idempotency_key: filters.key,
      limit: PAGE, after,
    };
    let data;
    let totals;
    const countNow = Date.now() - countedAt >= COUNTS_MS;
    try {
      [data, totals] = await Promise.all([
        ctx.api.get(`/api/v1/jobs${query(params)}`, {signal: ctx.signal}),
        countNow ? ctx.api.get(`/api/v1/jobs/counts${query(pick(params, COUNT_FILTERS))}`, {signal: ctx.signal}) : null,
      ]);
    } catch (err) {
      if (isAbort(err) || err.status === 401) return;
      if (!showFieldError(filterForm, FIELD_IDS, err)) ctx.showError(err);
      ctx.ready();
      return;
    }
    ctx.clearError();
    nextCursor = data.next || '';
    syncRows(tbody, data.jobs, (j) => j.id, (j) => row(j, bulk));
    bulk.shown(data.jobs);
    if (totals) {
      countedAt = Date.now();
      renderCounts(counts, totals, filters);
      counts.title = `counted at ${new Date(countedAt).toISOString()}; recounted every ${COUNTS_MS / 1000} s`;
    }
    empty.hidden = data.jobs.length > 0;
    next.disabled = !nextCursor;
    prev.disabled = stack.length === 0;
    first.disabled = after === '';
    pageLabel.textContent = `Page ${stack.length + 1}`;
    replace(refreshed, timeEl(new Date().toISOString()));
    ctx.ready();
  }

  async function go(newStack, cursor) {
    stack = newStack;
    after = cursor || '';
    await load();
  }

  await load();
  every(3000, ctx.signal, async () => {
    if (auto.checked) await load();
  }).catch(ctx.showError);
}

function wide() {
  return window.matchMedia('(min-width: 601px)').matches;
}

function pick(obj, keys) {
  return Object.fromEntries(keys.map((k) => [k, obj[k]]));
}

// renderCounts shows each status's count as a link to the list filtered by
// it (the other filters kept), and the total. "10000+" is at least that.
function renderCounts(el, totals, filters) {
  const n = (count, atLeast) => (atLeast ? `${count}+` : String(count));
  const link = (status, label, count, atLeast) => h('a', {
    href: `#/jobs${query({...filters, status})}`, 'data-status': status || 'all',
    'aria-current': filters.status === status ? 'true' : false, class: `count count-${status || 'all'}`},
  h('span', {class: 'count-label'}, label), ' ', h('span', {class: 'count-n'}, n(count, atLeast)));
  replace(el,
    link('', 'all', totals.total, totals.total_at_least),
    totals.counts.map((c) => link(c.status, c.status, c.count, c.at_least)));
}

// short cuts a long reason for the list; the cell's title has all of it.
function short(text) {
  return text.length > REASON_MAX ? `${text.slice(0, REASON_MAX - 1)}…` : text;
}

function row(j, bulk) {
  const reason = failureReason(j);
  return h('tr', {'data-job-id': j.id},
    h('td', {'data-col': 'select'}, bulk.checkbox(j)),
    h('td', {'data-col': 'id'}, h('a', {href: `#/jobs/${j.id}`, class: 'mono'}, j.id)),
    h('td', {'data-col': 'status', class: `status-${j.status}`}, statusBadge(j.status)),
    h('td', {'data-col': 'reason', class: 'reason error-text', title: reason}, short(reason)),
    h('td', {'data-col': 'command'}, j.command),
    h('td', {'data-col': 'submitter'}, j.submitter || ''),
    h('td', {'data-col': 'attempt', class: 'num'}, String(j.attempt)),
    h('td', {'data-col': 'created'}, timeEl(j.created_at)),
    h('td', {'data-col': 'duration', class: 'num'}, span(j.started_at, j.finished_at)),
    h('td', {'data-col': 'agent'}, j.agent || ''));
}

// toLocalInput turns RFC 3339 into a datetime-local value (local time).
function toLocalInput(iso) {
  const d = new Date(iso);
  if (!iso || Number.isNaN(d.getTime())) return '';
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// fromLocalInput turns a datetime-local value (local time) into RFC 3339 UTC.
function fromLocalInput(value) {
  if (!value) return '';
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? value : d.toISOString().replace('.000Z', 'Z');
}

function filtersForm(filters, apply) {
  const status = h('select', {id: 'filter-status', name: 'status', 'aria-describedby': 'filter-status-error'},
    h('option', {value: ''}, 'any'),
    STATUSES.map((st) => h('option', {value: st, selected: filters.status === st}, st)));
  const form = h('form', {'data-testid': 'job-filters', class: 'filters', on: {submit}},
    h('div', {class: 'field'},
      h('label', {for: 'filter-status'}, 'Status'), status,
      h('span', {class: 'field-error', id: 'filter-status-error', 'data-error-for': 'filter-status', hidden: true})),
    field('Command', {id: 'filter-command', value: filters.command, autocomplete: 'off'}),
    field('Submitter', {id: 'filter-submitter', value: filters.submitter, autocomplete: 'off'}),
    field('Agent', {id: 'filter-agent', value: filters.agent, autocomplete: 'off'}, 'Jobs it holds now.'),
    field('Created since', {id: 'filter-since', type: 'datetime-local', value: toLocalInput(filters.since)}),
    field('Created before', {id: 'filter-until', type: 'datetime-local', value: toLocalInput(filters.until)}),
    field('Idempotency key', {id: 'filter-key', value: filters.key, autocomplete: 'off'}),
    h('div', {class: 'field actions'},
      h('button', {type: 'submit', 'data-testid': 'filters-apply'}, 'Apply filters')));

  function submit(ev) {
    ev.preventDefault();
    clearFieldErrors(form);
    const el = form.elements;
    // An invalid datetime-local reads as ""; keep what the hash had then.
    const since = el['filter-since'].value ? fromLocalInput(el['filter-since'].value)
      : (el['filter-since'].validity.badInput ? filters.since : '');
    const until = el['filter-until'].value ? fromLocalInput(el['filter-until'].value)
      : (el['filter-until'].validity.badInput ? filters.until : '');
    apply({
      status: status.value, command: el['filter-command'].value.trim(),
      submitter: el['filter-submitter'].value.trim(), agent: el['filter-agent'].value.trim(),
      since, until, key: el['filter-key'].value.trim(),
    });
  }
  return form;
}

function searchBox(ctx, filters) {
  const input = h('input', {id: 'search', name: 'search', type: 'search', autocomplete: 'off',
    placeholder: 'job ID or idempotency key', 'aria-describedby': 'search-error'});
  const error = h('span', {class: 'field-error', id: 'search-error', 'data-error-for': 'search', hidden: true});
  const form = h('form', {'data-testid': 'job-search', class: 'search', role: 'search', on: {submit}},
    h('label', {for: 'search'}, 'Find a job'),
    h('div', {class: 'inline'}, input, h('button', {type: 'submit', 'data-testid': 'search-submit'}, 'Search')),
    error);

  async function submit(ev) {
    ev.preventDefault();
    error.hidden = true;
    const value = input.value.trim();
    if (!value) return;
    if (!UUID.test(value)) {
      ctx.navigate(`#/jobs${query({...filters, key: value})}`);
      return;
    }
    try {
      await ctx.api.get(`/api/v1/jobs/${encodeURIComponent(value)}`, {signal: ctx.signal});
    } catch (err) {
      if (isAbort(err) || err.status === 401) return;
      error.textContent = err.status === 404 ? `No job ${value}.` : err.message;
      error.hidden = false;
      input.setAttribute('aria-invalid', 'true');
      return;
    }
    ctx.navigate(`#/jobs/${value.toLowerCase()}`);
  }
  return form;
}
