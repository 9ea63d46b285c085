// dom.js - building the page without ever parsing a string as HTML: every name, header or
// payload the node returns goes in as a text node (textContent), so a queue named
// <img src=x onerror=alert(1)> is shown as those characters and nothing else.

// h('tr', {class: 'x', onclick: fn}, child, 'text', [more]) -> element. Attributes are set as
// attributes (or properties for on* handlers and value/checked); children that are not nodes
// become text nodes.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'hidden') el[k] = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

// One formatter for every number (toLocaleString with options builds one per call: 500
// rows of a queue page took a second that way).
const numFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 2 });

export function fmtNum(n) {
  if (n === undefined || n === null || n === '') return '';
  if (typeof n !== 'number') return String(n);
  return numFmt.format(n);
}

export function fmtBytes(n) {
  if (typeof n !== 'number') return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${u[i]}`;
}

export function fmtDuration(ms) {
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400); s %= 86400;
  const hh = Math.floor(s / 3600); s %= 3600;
  const mm = Math.floor(s / 60); s %= 60;
  return (d ? `${d}d ` : '') + `${hh}h ${mm}m ${s}s`;
}

// Any JSON value as text (objects compactly).
export function fmtValue(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

// A two-column table of an object's keys and values.
export function kvTable(obj, keys) {
  const ks = keys || Object.keys(obj || {});
  return h('table', { class: 'kv' }, ks.map((k) => h('tr', {}, h('th', {}, k), h('td', {}, fmtValue(obj[k])))));
}

// A simple table: cols = [{title, get(row) -> node|text, num}]
export function table(cols, rows, attrs) {
  return h('table', attrs || {},
    h('thead', {}, h('tr', {}, cols.map((c) => h('th', { class: c.num ? 'num' : '' }, c.title)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, cols.map((c) => h('td', { class: c.num ? 'num' : '' }, c.get(r)))))));
}

// A #/ link whose path segments are encoded (names may hold any character).
export function link(text, ...segs) {
  return h('a', { href: '#/' + segs.map((s) => encodeURIComponent(s)).join('/') }, text);
}

// The app's banner: a message that stays until the next one (errors in red).
export function say(msg, isError) {
  const b = document.getElementById('banner');
  if (!b) return;
  b.hidden = !msg;
  b.className = isError ? '' : 'info';
  b.textContent = msg || '';
}

// Run an action from a button: disable it meanwhile, show what came back or the error.
export async function act(button, fn, okText) {
  button.disabled = true;
  try {
    const res = await fn();
    if (okText) say(typeof okText === 'function' ? okText(res) : okText, false);
    return res;
  } catch (e) {
    say(`${button.textContent}: ${e.message}`, true);
    return undefined;
  } finally {
    button.disabled = false;
  }
}

export function field(label, input) {
  return h('label', {}, label, input);
}
