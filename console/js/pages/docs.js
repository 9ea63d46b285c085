// docs.js - #/docs/PAGE.md[/ANCHOR]: a page of the reference (docs/PAGE.md, built into the node
// and served as text at /docs/PAGE.md) rendered as HTML by marked (Debian's libjs-marked, built
// in as /vendor/marked/marked.min.js and loaded by index.html as a classic script: the global
// `marked`). The Help links of every page open here.
//
// The pages are the project's own files, built in at build time, but what marked gives is still
// kept to what a reference page needs: raw HTML in the Markdown is shown as text (escaped, never
// parsed), images (not built in) as their alt text, and links are rewritten: another page
// (cluster.md, security.md#tls) opens here as #/docs/cluster.md, #/docs/security.md/tls; an
// anchor within the page as #/docs/THIS.md/ANCHOR (the console's routes own the hash); http(s)
// links open in a new tab; anything else (../README.md, source paths: not served by the node)
// stays text. Heading ids carry the prefix "doc-" so that no heading can take the id of one of
// the console's own elements (#login, #main). The page loads once; refresh() does nothing more.

import { h } from '../dom.js';

// a page name as the node serves them: one file name of docs/, nothing else
const PAGE = /^[A-Za-z0-9][A-Za-z0-9._-]*\.md$/;
const ID_PREFIX = 'doc-';

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
  .replace(/"/g, '&quot;').replace(/'/g, '&#39;');

// where a link of page `page` goes inside the console, or null (shown as text)
export function docHref(href, page) {
  const h = String(href || '');
  let m = /^([A-Za-z0-9][A-Za-z0-9._-]*\.md)(?:#(.*))?$/.exec(h);
  if (m) return `#/docs/${m[1]}${m[2] ? `/${encodeURIComponent(m[2])}` : ''}`;
  m = /^#(.+)$/.exec(h);
  if (m) return `#/docs/${page}/${encodeURIComponent(m[1])}`;
  return null;
}

function render(text, page) {
  const renderer = {
    html: (html) => esc(html),
    image: (href, title, alt) => esc(alt || ''),
    link(href, title, inner) {
      const t = title ? ` title="${esc(title)}"` : '';
      if (/^https?:\/\//i.test(href || '')) {
        return `<a href="${esc(href)}"${t} target="_blank" rel="noopener noreferrer">${inner}</a>`;
      }
      const to = docHref(href, page);
      if (to === null) return `<span class="doc-offsite" title="${esc(href)} (not served by the node)">${inner}</span>`;
      return `<a href="${esc(to)}"${t}>${inner}</a>`;
    },
  };
  const m = window.marked;
  return m.parse(text, { renderer: Object.assign(new m.Renderer(), renderer), headerIds: true,
    headerPrefix: ID_PREFIX, mangle: false, gfm: true });
}

export default {
  mount(main, params) {
    const page = params[0] || 'console.md';
    const anchor = params[1] || '';
    const body = h('article', { id: 'doc', class: 'doc' });
    const raw = h('p', { class: 'muted small' });
    main.append(raw, body);
    let done = false;
    return {
      async refresh() {
        if (done) return;
        done = true;
        if (!PAGE.test(page)) {
          body.textContent = `No such page of the reference: ${page}`;
          body.className = 'error';
          return;
        }
        document.title = `Sluice: ${page}`;
        raw.append('The reference, as built into this node: ', h('a', { href: `/docs/${page}`,
          target: '_blank', rel: 'noopener', id: 'doc-raw' }, `docs/${page} as plain text`));
        let resp;
        try {
          resp = await fetch(`/docs/${page}`, { credentials: 'same-origin' });
        } catch (e) {
          const err = new Error(`no answer from the node: ${e.message}`);
          err.status = 0;
          throw err;
        }
        if (!resp.ok) {
          body.textContent = resp.status === 404 ? `No such page of the reference: ${page}` : `HTTP ${resp.status}`;
          body.className = 'error';
          return;
        }
        body.innerHTML = render(await resp.text(), page);
        body.dataset.page = page;
        if (anchor) {
          const target = document.getElementById(ID_PREFIX + anchor);
          if (target) target.scrollIntoView();
        }
      },
    };
  },
};
