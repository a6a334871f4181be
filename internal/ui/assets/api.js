// The console's client of the JSON API. The bearer token lives in
// sessionStorage only (never in a URL, never in local storage, never logged).

const TOKEN_KEY = 'tether.token';

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return ''; // storage disabled: auth-off agents still work
  }
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // nothing stored
  }
}

// ApiError is an error answer of the API ({"error","field","code"}) or a
// network failure (status 0).
export class ApiError extends Error {
  constructor(status, body) {
    super(body.error || `HTTP ${status}`);
    this.status = status;
    this.field = body.field || '';
    this.code = body.code || '';
    this.jobStatus = body.status || '';
  }
}

function headers(token, extra) {
  const hs = new Headers(extra);
  hs.set('Accept', 'application/json');
  if (token) hs.set('Authorization', `Bearer ${token}`);
  return hs;
}

async function errorOf(resp) {
  let body = {};
  try {
    body = await resp.json();
  } catch {
    body = {error: `${resp.status} ${resp.statusText}`.trim()};
  }
  return new ApiError(resp.status, body);
}

// createApi returns the client; unauthorized is called on every 401 (the
// app shows the login form) before the ApiError is thrown.
export function createApi(unauthorized) {
  async function send(path, {method = 'GET', body, signal, token = getToken()} = {}) {
    const init = {method, signal, headers: headers(token), credentials: 'same-origin'};
    if (body !== undefined) {
      init.headers.set('Content-Type', 'application/json');
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      if (err.name === 'AbortError') throw err;
      throw new ApiError(0, {error: `cannot reach the agent: ${err.message}`});
    }
    if (resp.status === 401) {
      const err = await errorOf(resp);
      unauthorized(err);
      throw err;
    }
    if (!resp.ok) throw await errorOf(resp);
    return resp;
  }

  return {
    async get(path, opts) {
      return (await send(path, opts)).json();
    },
    async post(path, body, opts) {
      return (await send(path, {...opts, method: 'POST', body})).json();
    },
    // open answers the Response itself, for streaming bodies.
    open: send,
  };
}

// query builds a query string of the non-empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const str = q.toString();
  return str ? `?${str}` : '';
}

export function isAbort(err) {
  return err && err.name === 'AbortError';
}
