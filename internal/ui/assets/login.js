// Login: keeps a bearer token in sessionStorage after checking it against
// GET /api/v1/commands, then returns to the route that needed it.

import {setToken, clearToken, isAbort} from './api.js';
import {h} from './dom.js';

export async function mount(ctx) {
  const next = ctx.params.get('next') || '/jobs';
  const error = h('p', {class: 'form-error', 'data-testid': 'login-error', role: 'alert', hidden: true});
  const input = h('input', {id: 'login-token', name: 'token', type: 'password', autocomplete: 'current-password', 'aria-describedby': 'login-help'});
  const form = h('form', {'data-testid': 'login-form', class: 'login', on: {submit}},
    h('div', {class: 'field'},
      h('label', {for: 'login-token'}, 'API token'),
      input,
      h('small', {class: 'hint', id: 'login-help'},
        'One of the agent\'s http.tokens. It is kept in this tab\'s session storage only.')),
    h('button', {type: 'submit', 'data-testid': 'login-submit'}, 'Log in'),
    error);
  ctx.root.append(h('h1', {}, 'Log in'), form);
  ctx.ready();
  input.focus();

  async function submit(ev) {
    ev.preventDefault();
    error.hidden = true;
    const token = input.value.trim();
    if (!token) {
      showError('Enter a token.');
      return;
    }
    try {
      // Checked with this token explicitly: a 401 must not bounce to login.
      await ctx.api.get('/api/v1/commands', {token, signal: ctx.signal});
    } catch (err) {
      if (isAbort(err)) return;
      showError(err.message);
      return;
    }
    setToken(token);
    ctx.navigate(`#${next.startsWith('/') && !next.startsWith('/login') ? next : '/jobs'}`);
  }

  function showError(msg) {
    clearToken();
    error.textContent = msg;
    error.hidden = false;
    input.setAttribute('aria-invalid', 'true');
    input.focus();
  }
}
