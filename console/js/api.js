// api.js - the console's only way to the node: fetch() on /api/... with the session cookie
// (HttpOnly: never seen here) and the X-Sluice-Request header that the node requires on every
// request a session makes that is not a GET (its CSRF guard). Errors become ApiError with the
// node's own reason; a 401 tells the app to show the login form. A request that gets no
// answer at all (the node down or restarting) is an ApiError with status 0.

export class ApiError extends Error {
  constructor(status, body) {
    const reason = body && (body.reason || body.error) ? String(body.reason || body.error) : `HTTP ${status}`;
    super(reason);
    this.status = status;
    this.body = body || {};
  }
}

let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

// encodeURIComponent for one path segment ("/" is %2F, as the API wants).
export const seg = (s) => encodeURIComponent(s);

export async function api(method, path, body, extraHeaders) {
  const headers = { 'X-Sluice-Request': '1', ...(extraHeaders || {}) };
  const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp, text;
  try {
    resp = await fetch('/api' + path, init);
    text = await resp.text();
  } catch (e) {
    throw new ApiError(0, { reason: `no answer from the node: ${e.message}` });
  }
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = { reason: text }; }
  }
  if (resp.status === 401 && !path.startsWith('/session')) onUnauthorized();
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

export const get = (path) => api('GET', path);
export const post = (path, body) => api('POST', path, body === undefined ? {} : body);
export const put = (path, body) => api('PUT', path, body === undefined ? {} : body);
export const del = (path) => api('DELETE', path);

// Log in: the password goes once, in this request's basic auth header, and is kept nowhere.
export async function login(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return api('POST', '/session', undefined, { Authorization: 'Basic ' + btoa(bin) });
}

export const logout = () => api('DELETE', '/session');
