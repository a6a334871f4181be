// DOM and formatting helpers shared by the views. Text only ever goes in
// through textContent (text nodes): job output and API data are hostile.

const SVG_NS = 'http://www.w3.org/2000/svg';

// set applies attrs to el. Keys: "class", "dataset" (object), "on" (object
// of event listeners), a boolean (present when true) or any attribute.
function set(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'on') {
      for (const [type, fn] of Object.entries(value)) el.addEventListener(type, fn);
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (key === 'style' || key.startsWith('on')) {
      // The CSP forbids inline styles and handlers; refuse them loudly.
      throw new Error(`h: attribute ${key} is not allowed`);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// h builds an HTML element: h('a', {href: '#/jobs'}, 'Jobs').
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  set(el, attrs);
  append(el, children);
  return el;
}

// s builds an SVG element (attributes such as width are allowed by the CSP).
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  set(el, attrs);
  append(el, children);
  return el;
}

// replace swaps el's children for children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// Times are shown in one of three modes, chosen in the header: utc (the
// default, as the API and event messages write them), local (with the offset) and
// relative (to now). Every form carries its zone. The choice is kept in the
// tab's sessionStorage, like the token: nothing the console stores outlives
// the tab.
const TIME_KEY = 'tether.times';
export const TIME_MODES = ['utc', 'local', 'relative'];

export function timeMode() {
  try {
    const m = sessionStorage.getItem(TIME_KEY);
    return TIME_MODES.includes(m) ? m : 'utc';
  } catch {
    return 'utc';
  }
}

export function setTimeMode(mode) {
  try {
    sessionStorage.setItem(TIME_KEY, mode);
  } catch {
    // storage disabled: the choice lasts until the page reloads
  }
  refreshTimes(document);
}

const pad = (n, w = 2) => String(n).padStart(w, '0');

// offsetText is a local offset in minutes east of UTC as "UTC+05:30".
function offsetText(east) {
  const sign = east < 0 ? '-' : '+';
  const abs = Math.abs(east);
  return `UTC${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}

// formatTime writes an RFC 3339 instant in the mode: "2026-12-07 14:25:01
// UTC", "2026-12-07 15:25:01 UTC+01:00" or "3m12s ago".
export function formatTime(iso, mode = timeMode()) {
  const d = new Date(iso);
  if (!iso || Number.isNaN(d.getTime())) return iso || '';
  if (mode === 'relative') {
    const secs = Math.round((Date.now() - d.getTime()) / 1000);
    return secs >= 0 ? `${duration(secs)} ago` : `in ${duration(-secs)}`;
  }
  if (mode === 'local') {
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${offsetText(-d.getTimezoneOffset())}`;
  }
  return `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

// timeEl shows an RFC 3339 instant in the chosen mode, the exact value in
// datetime and title. Empty for no value.
export function timeEl(iso) {
  if (!iso) return '';
  if (Number.isNaN(new Date(iso).getTime())) return iso;
  return h('time', {datetime: iso, title: iso}, formatTime(iso));
}

// refreshTimes rewrites every time element under root in the current mode.
export function refreshTimes(root) {
  for (const t of root.querySelectorAll('time[datetime]')) {
    const text = formatTime(t.dateTime);
    if (t.textContent !== text) t.textContent = text;
  }
}

// duration formats seconds the way Go does: 1h2m3s, 4m0s, 2.5s, 0.25s.
export function duration(seconds) {
  if (seconds === undefined || seconds === null || Number.isNaN(seconds)) return '';
  const neg = seconds < 0 ? '-' : '';
  let rest = Math.abs(seconds);
  if (rest < 60) {
    const digits = rest < 10 ? 2 : 0;
    return neg + String(Number(rest.toFixed(digits))) + 's';
  }
  rest = Math.round(rest);
  const hours = Math.floor(rest / 3600);
  const minutes = Math.floor((rest % 3600) / 60);
  const secs = rest % 60;
  return neg + (hours ? `${hours}h` : '') + `${minutes}m${secs}s`;
}

// span is the duration from one RFC 3339 instant to another, or to now
// (then marked "so far"); '' without a start.
export function span(fromISO, toISO) {
  if (!fromISO) return '';
  const d = duration(Math.max(0, between(fromISO, toISO)));
  return toISO ? d : `${d} so far`;
}

// between is the seconds from one RFC 3339 instant to another (or now).
export function between(fromISO, toISO) {
  if (!fromISO) return undefined;
  const to = toISO ? Date.parse(toISO) : Date.now();
  return (to - Date.parse(fromISO)) / 1000;
}

export const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);

export function statusBadge(status) {
  return h('span', {class: `status status-${status}`}, status);
}

// syncRows updates tbody in place to hold one row per item, in order:
// rows are keyed by key(item); a cell is replaced only when its text or
// class changed, so scroll position and focus inside unchanged cells stay.
export function syncRows(tbody, items, key, makeRow) {
  const existing = new Map();
  for (const tr of tbody.rows) existing.set(tr.dataset.key, tr);
  const wanted = [];
  for (const item of items) {
    const k = key(item);
    const fresh = makeRow(item);
    fresh.dataset.key = k;
    const old = existing.get(k);
    if (!old) {
      wanted.push(fresh);
      continue;
    }
    existing.delete(k);
    updateRow(old, fresh);
    wanted.push(old);
  }
  for (const tr of existing.values()) tr.remove();
  // Move rows only when the order changed: moving a node drops its focus.
  wanted.forEach((tr, i) => {
    if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
  });
}

function updateRow(old, fresh) {
  for (const name of fresh.getAttributeNames()) {
    if (old.getAttribute(name) !== fresh.getAttribute(name)) old.setAttribute(name, fresh.getAttribute(name));
  }
  for (const name of old.getAttributeNames()) {
    if (!fresh.hasAttribute(name)) old.removeAttribute(name);
  }
  const cells = [...fresh.cells];
  cells.forEach((cell, i) => {
    const prev = old.cells[i];
    if (!prev) {
      old.append(cell);
    } else if (prev.textContent !== cell.textContent || prev.className !== cell.className) {
      prev.replaceWith(cell);
    }
  });
  while (old.cells.length > cells.length) old.lastElementChild.remove();
}

// tableWrap puts a table in a horizontally scrolling, focusable region, so
// a wide table stays usable on a phone and by keyboard.
export function tableWrap(label, table) {
  return h('div', {class: 'table-wrap', role: 'region', 'aria-label': label, tabindex: '0'}, table);
}

// headRow builds a thead of column headers.
export function head(...names) {
  return h('thead', {}, h('tr', {}, names.map((n) => h('th', {scope: 'col'}, n))));
}

// sleep waits ms or until signal aborts (then it resolves early).
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done);
  });
}

// every calls fn every ms (the first time after ms) until signal aborts,
// never overlapping; skipped while the tab is hidden.
export async function every(ms, signal, fn) {
  for (;;) {
    await sleep(ms, signal);
    if (signal.aborted) return;
    if (!document.hidden) await fn();
  }
}

// fieldErrors shows an API error's field next to its input: the element
// [data-error-for=<id>] where id is fieldIds[field]. Returns whether it
// found a place for it.
export function showFieldError(form, fieldIds, err) {
  const id = err.field && fieldIds[err.field];
  if (!id) return false;
  const slot = form.querySelector(`[data-error-for="${id}"]`);
  if (!slot) return false;
  slot.textContent = err.message;
  slot.hidden = false;
  form.querySelector(`#${id}`)?.setAttribute('aria-invalid', 'true');
  return true;
}

export function clearFieldErrors(form) {
  for (const slot of form.querySelectorAll('[data-error-for]')) {
    slot.textContent = '';
    slot.hidden = true;
  }
  for (const input of form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
}

// field is a labelled input with its error slot below it.
export function field(label, attrs, hint) {
  const input = h('input', {name: attrs.id, ...attrs, 'aria-describedby': `${attrs.id}-error`});
  return h('div', {class: 'field'},
    h('label', {for: attrs.id}, label),
    input,
    hint ? h('small', {class: 'hint'}, hint) : '',
    h('span', {class: 'field-error', id: `${attrs.id}-error`, 'data-error-for': attrs.id, hidden: true}));
}
