// tether console: a hash-routed client of /api/v1. Each view is a module
// exporting mount(ctx); ctx.signal aborts when the view is left, which
// stops its timers, polls and streams.

import {createApi, getToken, clearToken, isAbort} from './api.js';
import {h, timeMode, setTimeMode, refreshTimes} from './dom.js';
import * as jobs from './jobs.js';
import * as job from './job.js';
import * as agents from './agents.js';
import * as cleanups from './cleanups.js';
import * as commands from './commands.js';
import * as login from './login.js';

const main = document.getElementById('main');
const banner = document.querySelector('[data-testid=app-error]');
const logout = document.querySelector('[data-testid=logout]');

// route parses location.hash: "#/jobs/<id>?a=b" → {view, id, params, hash}.
function route() {
  const raw = location.hash.startsWith('#/') ? location.hash.slice(1) : '/jobs';
  const [path, search = ''] = raw.split('?', 2);
  const parts = path.split('/').filter(Boolean);
  const params = new URLSearchParams(search);
  const hash = `#${raw}`;
  switch (parts[0]) {
    case 'jobs':
      return parts[1] ? {view: job, name: 'job', id: decodeURIComponent(parts[1]), params, hash}
        : {view: jobs, name: 'jobs', params, hash};
    case 'agents': return {view: agents, name: 'agents', params, hash};
    case 'cleanups': return {view: cleanups, name: 'cleanups', params, hash};
    case 'commands': return {view: commands, name: 'commands', params, hash};
    case 'login': return {view: login, name: 'login', params, hash};
    default: return {view: jobs, name: 'jobs', params: new URLSearchParams(), hash: '#/jobs'};
  }
}

function showError(err) {
  if (isAbort(err)) return;
  banner.textContent = err && err.message ? err.message : String(err);
  banner.hidden = false;
}

function clearError() {
  banner.hidden = true;
  banner.textContent = '';
}

function needLogin() {
  const current = route();
  if (current.name === 'login') return;
  location.hash = `#/login?next=${encodeURIComponent(current.hash.slice(1))}`;
}

const api = createApi(needLogin);
let current = null; // the mounted view's abort controller

function markNav(name) {
  const section = name === 'job' ? 'jobs' : name;
  for (const a of document.querySelectorAll('nav a[data-testid]')) {
    if (a.dataset.testid === `nav-${section}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function render() {
  // #main is the skip link's target, not a route.
  if (location.hash === '#main') return;
  if (current) current.abort();
  current = new AbortController();
  const r = route();
  clearError();
  logout.hidden = !getToken();
  markNav(r.name);
  const root = h('section', {'data-view': r.name, 'aria-busy': 'true'});
  main.replaceChildren(root);
  const ctx = {
    api, root, params: r.params, id: r.id, hash: r.hash, signal: current.signal,
    showError, clearError,
    ready() {
      root.dataset.ready = 'true';
      root.removeAttribute('aria-busy');
    },
    navigate(hash) {
      if (location.hash === hash) render();
      else location.hash = hash;
    },
  };
  document.title = `${r.name} · tether`;
  r.view.mount(ctx).catch((err) => {
    if (isAbort(err) || err.status === 401) return;
    showError(err);
    ctx.ready();
  });
}

document.querySelector('a.skip').addEventListener('click', (ev) => {
  ev.preventDefault(); // keep the route in the hash
  main.focus();
});

logout.addEventListener('click', () => {
  clearToken();
  logout.hidden = true;
  location.hash = '#/login';
});

// The times' mode applies at once to every time shown; relative ones are
// rewritten every second.
const timeSelect = document.getElementById('time-mode');
timeSelect.value = timeMode();
timeSelect.addEventListener('change', () => setTimeMode(timeSelect.value));
setInterval(() => {
  if (timeMode() === 'relative' && !document.hidden) refreshTimes(document);
}, 1000);

window.addEventListener('hashchange', render);
if (!location.hash.startsWith('#/')) history.replaceState(null, '', '#/jobs');
render();
