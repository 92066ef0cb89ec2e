/// The live decision view's page (docs/view.md): HTML, CSS and JavaScript compiled into the
/// binary, served by the admin listener at `/view`, `/view/view.css` and `/view/view.js`. No
/// external asset and no build step: the page's Content-Security-Policy (`script-src 'self'`,
/// `style-src 'self'`, `connect-src 'self'`) lets it load these two files and reach its own origin
/// only, so the HTML has no inline script, no inline style and no event-handler attribute. Every
/// value of a record is attacker-controlled (a path, a user-agent, a host): the script puts record
/// text into the page with `textContent` and `createElement` only, never as HTML
/// (Tests/Browser/view_test.py checks it in a real browser with hostile strings).
enum ViewPage {
    static let html: [UInt8] = Array(htmlText.utf8)
    static let css: [UInt8] = Array(cssText.utf8)
    static let javascript: [UInt8] = Array(javascriptText.utf8)

    private static let htmlText = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="referrer" content="no-referrer">
        <title>scopeproxy: live decisions</title>
        <link rel="icon" href="data:,">
        <link rel="stylesheet" href="/view/view.css">
        <script src="/view/view.js"></script>
        </head>
        <body>
        <header class="bar">
          <h1>scopeproxy <span class="sub">live decisions</span></h1>
          <p id="connection" class="connection" data-state="connecting" role="status" aria-live="polite">connecting</p>
          <nav id="counts" class="counts" aria-label="Decisions seen (click to filter)"></nav>
          <button id="theme" class="theme" type="button" title="Switch between dark and light">theme</button>
        </header>
        <form id="filters" class="filters" role="search" autocomplete="off">
          <label>Find <input id="filter-text" type="search" placeholder="path, id, header ( / )" spellcheck="false"></label>
          <label>Client <select id="filter-client"><option value="">any</option></select></label>
          <label>Origin <select id="filter-origin"><option value="">any</option></select></label>
          <label>Scope <select id="filter-scope"><option value="">any</option></select></label>
          <label>Decision <select id="filter-decision"><option value="">any</option></select></label>
          <button id="filter-clear" type="button">Clear</button>
          <span id="shown" class="shown"></span>
        </form>
        <p id="notice" class="notice" hidden></p>
        <main id="main" class="main">
          <section class="table-wrap" aria-label="Exchanges, newest first">
            <table id="exchanges" class="exchanges">
              <thead>
                <tr>
                  <th class="col-time" scope="col">Time (UTC)</th>
                  <th class="col-client" scope="col">Client</th>
                  <th class="col-method" scope="col">Method</th>
                  <th class="col-request" scope="col">Origin and path</th>
                  <th class="col-status" scope="col">Status</th>
                  <th class="col-scope" scope="col">Scope</th>
                  <th class="col-decision" scope="col">Decision</th>
                  <th class="col-duration" scope="col">Duration</th>
                  <th class="col-id" scope="col">Request id</th>
                </tr>
              </thead>
              <tbody id="rows"></tbody>
            </table>
            <p id="empty" class="empty">Waiting for requests through the proxy. Each exchange appears here as it ends.</p>
          </section>
          <aside id="detail" class="detail" aria-label="Exchange detail" tabindex="-1" hidden></aside>
        </main>
        <footer class="keys">
          <kbd>j</kbd>/<kbd>k</kbd> or <kbd>&darr;</kbd>/<kbd>&uarr;</kbd> move &middot; <kbd>Enter</kbd> open &middot;
          <kbd>Esc</kbd> close &middot; <kbd>/</kbd> find &middot; <kbd>c</kbd> copy as curl
        </footer>
        </body>
        </html>
        """#

    private static let cssText = #"""
        :root {
          color-scheme: light;
          --bg: #ffffff; --fg: #1c2128; --muted: #5b6470; --line: #d8dee4; --panel: #f6f8fa; --hover: #eef2f6;
          --selected: #dbe9ff; --accent: #0b5cd5; --focus: #0b5cd5; --code: #f3f5f7;
          --ok: #1a7f37; --warn: #9a6700; --bad: #c62828; --info: #0b5cd5; --secret: #7a3db8;
        }
        :root[data-theme="dark"] {
          color-scheme: dark;
          --bg: #0f1317; --fg: #e1e6eb; --muted: #98a2ad; --line: #2d343c; --panel: #161b21; --hover: #1d242c;
          --selected: #1c3a63; --accent: #6ea8ff; --focus: #8ab8ff; --code: #12171c;
          --ok: #4fc16b; --warn: #d9a93a; --bad: #ff6b6b; --info: #6ea8ff; --secret: #c79bff;
        }
        @media (prefers-color-scheme: dark) {
          :root:not([data-theme="light"]) {
            color-scheme: dark;
            --bg: #0f1317; --fg: #e1e6eb; --muted: #98a2ad; --line: #2d343c; --panel: #161b21; --hover: #1d242c;
            --selected: #1c3a63; --accent: #6ea8ff; --focus: #8ab8ff; --code: #12171c;
            --ok: #4fc16b; --warn: #d9a93a; --bad: #ff6b6b; --info: #6ea8ff; --secret: #c79bff;
          }
        }
        * { box-sizing: border-box; }
        html, body { height: 100%; }
        body {
          margin: 0; display: flex; flex-direction: column; background: var(--bg); color: var(--fg);
          font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
        }
        code, pre, kbd, .mono, td.col-time, td.col-request, td.col-id, td.col-duration, td.col-status {
          font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12px;
        }
        :focus-visible { outline: 2px solid var(--focus); outline-offset: 1px; }
        button, select, input, textarea { font: inherit; color: inherit; }
        button, select, input {
          background: var(--bg); border: 1px solid var(--line); border-radius: 4px; padding: 2px 6px;
        }
        button { cursor: pointer; }
        button:hover { background: var(--hover); }
        .bar {
          display: flex; align-items: center; gap: 12px; padding: 6px 12px; border-bottom: 1px solid var(--line);
          background: var(--panel);
        }
        h1 { font-size: 15px; margin: 0; white-space: nowrap; }
        h1 .sub { font-weight: normal; color: var(--muted); }
        .connection { margin: 0; white-space: nowrap; }
        .connection::before { content: "\25CF "; color: var(--muted); }
        .connection[data-state="live"]::before { color: var(--ok); }
        .connection[data-state="reconnecting"]::before, .connection[data-state="connecting"]::before { color: var(--warn); }
        .connection[data-state="unauthorized"]::before { color: var(--bad); }
        .connection[data-state="unauthorized"] { color: var(--bad); font-weight: 600; }
        .counts { display: flex; flex-wrap: wrap; gap: 4px; flex: 1; }
        .counts button { border-radius: 10px; padding: 0 8px; font-size: 12px; }
        .counts button[aria-pressed="true"] { background: var(--selected); border-color: var(--accent); }
        .counts .n { font-weight: 600; margin-left: 4px; }
        .theme { margin-left: auto; }
        .filters {
          display: flex; flex-wrap: wrap; align-items: center; gap: 6px 14px; padding: 6px 12px;
          border-bottom: 1px solid var(--line);
        }
        .filters label { color: var(--muted); white-space: nowrap; }
        .filters select, .filters input { color: var(--fg); max-width: 220px; }
        .filters input[type="search"] { width: 220px; }
        .shown { color: var(--muted); margin-left: auto; }
        .notice { margin: 0; padding: 8px 12px; background: var(--panel); border-bottom: 1px solid var(--bad); color: var(--bad); }
        .main { flex: 1; display: flex; min-height: 0; }
        .table-wrap { flex: 1; overflow: auto; min-width: 0; }
        .exchanges { width: 100%; border-collapse: collapse; table-layout: fixed; }
        .exchanges th {
          position: sticky; top: 0; background: var(--panel); text-align: left; font-weight: 600; color: var(--muted);
          border-bottom: 1px solid var(--line); padding: 4px 6px; font-size: 12px; z-index: 1;
        }
        .exchanges td {
          padding: 3px 6px; border-bottom: 1px solid var(--line); white-space: nowrap; overflow: hidden;
          text-overflow: ellipsis;
        }
        .exchanges tbody tr { cursor: pointer; }
        .exchanges tbody tr:hover { background: var(--hover); }
        .exchanges tbody tr[aria-selected="true"] { background: var(--selected); }
        .exchanges tbody tr:focus-visible { outline: 2px solid var(--focus); outline-offset: -2px; }
        .exchanges tbody tr.fresh td:first-child { box-shadow: inset 3px 0 0 var(--accent); }
        .col-time { width: 104px; }
        .col-client { width: 110px; }
        .col-method { width: 78px; }
        .col-status { width: 52px; }
        .col-scope { width: 96px; }
        .col-decision { width: 118px; }
        .col-duration { width: 80px; text-align: right; }
        th.col-duration { text-align: right; }
        .col-id { width: 140px; }
        td.col-request .host { color: var(--muted); }
        td.col-request .hop { color: var(--warn); margin-right: 4px; }
        .main.open .col-client, .main.open .col-scope, .main.open .col-id, .main.open .col-duration { display: none; }
        .empty { color: var(--muted); padding: 16px 12px; margin: 0; }
        .decision { font-weight: 600; }
        .decision-injected, .decision-signed, .decision-substituted, .decision-intercept { color: var(--ok); }
        .decision-stripped, .decision-scrubbed, .decision-followed, .decision-tunnel { color: var(--info); }
        .decision-refused, .decision-failed, .decision-redirect_blocked, .decision-deny { color: var(--bad); }
        .decision-passed { color: var(--muted); }
        .status-4, .status-5 { color: var(--bad); }
        .status-3 { color: var(--warn); }
        .detail {
          width: 48%; max-width: 760px; min-width: 380px; overflow: auto; border-left: 1px solid var(--line);
          background: var(--panel); padding: 8px 14px 20px;
        }
        .detail:focus { outline: none; }
        .detail h2 { font-size: 14px; margin: 4px 0 6px; word-break: break-all; }
        .detail h3 { font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; color: var(--muted); margin: 14px 0 4px; }
        .detail h4 { font-size: 12px; margin: 8px 0 2px; font-weight: 600; }
        .detail .close { float: right; }
        .detail dl { display: grid; grid-template-columns: max-content 1fr; gap: 1px 10px; margin: 0; }
        .detail dt { color: var(--muted); }
        .detail dd { margin: 0; word-break: break-all; }
        .detail ul { margin: 0; padding-left: 18px; }
        .detail li { margin: 2px 0; }
        .detail pre {
          margin: 0; padding: 6px 8px; background: var(--code); border: 1px solid var(--line); border-radius: 4px;
          white-space: pre-wrap; overflow-wrap: anywhere; max-height: 320px; overflow: auto;
        }
        .detail .none { color: var(--muted); font-style: italic; }
        .secret-ref { color: var(--secret); font-weight: 600; }
        .redacted { color: var(--muted); }
        .chain button { margin: 2px 4px 2px 0; }
        .chain button[aria-current="true"] { background: var(--selected); border-color: var(--accent); }
        .curl-actions { display: flex; gap: 8px; align-items: center; margin-bottom: 4px; }
        .curl-status { color: var(--muted); }
        .curl-fallback { width: 100%; min-height: 90px; background: var(--code); border: 1px solid var(--accent); }
        .keys { padding: 4px 12px; border-top: 1px solid var(--line); color: var(--muted); font-size: 12px; background: var(--panel); }
        kbd { border: 1px solid var(--line); border-radius: 3px; padding: 0 4px; background: var(--bg); }
        @media (max-width: 1000px) {
          .main { flex-direction: column; }
          .detail { width: auto; max-width: none; min-width: 0; border-left: 0; border-top: 1px solid var(--line); max-height: 55%; }
        }
        """#

    private static let javascriptText = #"""
        // scopeproxy's live decision view (docs/view.md). Every value in a record comes from a client or an
        // origin (paths, header values, hosts, ids): it reaches the page through textContent, createTextNode,
        // title and Option only, never as HTML (no HTML parser ever sees it). The page talks to its own origin
        // only: the stream at /view/events (and one probe of it when the stream is refused).
        'use strict';

        (function () {
          const THEME_KEY = 'scopeproxy.view.theme';
          const MAX_ROWS = 2000;
          const MAX_OPTIONS = 500;
          const KNOWN_DECISIONS = ['injected', 'signed', 'substituted', 'stripped', 'scrubbed', 'passed', 'followed',
            'redirect_blocked', 'refused', 'failed', 'intercept', 'tunnel', 'deny'];

          // Before the first paint: the remembered theme, and the token out of the address bar (the server
          // answered /view?token=... with an HttpOnly cookie, so the token is not needed in the URL any more,
          // and a URL ends up in history, screenshots and shared links).
          try {
            const saved = window.localStorage.getItem(THEME_KEY);
            if (saved === 'dark' || saved === 'light') document.documentElement.setAttribute('data-theme', saved);
          } catch (error) { /* storage disabled: follow prefers-color-scheme */ }
          try {
            const here = new URL(window.location.href);
            if (here.searchParams.has('token')) {
              here.searchParams.delete('token');
              window.history.replaceState(null, '', here.pathname + here.search + here.hash);
            }
          } catch (error) { /* an address the URL parser refuses: nothing to remove */ }

          const rows = [];              // entries, newest first: { record, key, facets, tr }
          const seen = new Set();       // keys of the entries kept, so a replay after a reconnect adds nothing twice
          const byId = new Map();       // request id -> entries (the hops of one exchange share it)
          const counts = new Map();     // decision -> entries kept with it
          const filter = { text: '', client: '', origin: '', scope: '', decision: '' };
          let selected = null;
          let opened = null;
          let source = null;
          let retries = 0;
          let retryTimer = 0;
          let ui = null;

          function text(value) {
            if (value === null || value === undefined) return '';
            if (typeof value === 'object') {
              try { return JSON.stringify(value); } catch (error) { return ''; }
            }
            return String(value);
          }

          function el(tag, className, content) {
            const node = document.createElement(tag);
            if (className) node.className = className;
            if (content !== undefined && content !== null) append(node, content);
            return node;
          }

          // Appends strings as text nodes and nodes as they are; arrays flattened.
          function append(parent, content) {
            if (Array.isArray(content)) {
              for (const part of content) append(parent, part);
            } else if (content instanceof Node) {
              parent.appendChild(content);
            } else if (content !== undefined && content !== null) {
              parent.appendChild(document.createTextNode(text(content)));
            }
            return parent;
          }

          // A class name derived from a record's word: letters and _ only (classList refuses spaces, and
          // the word is the server's, not ours).
          function token(value) {
            return text(value).toLowerCase().replace(/[^a-z_]/g, '').slice(0, 40);
          }

          // Text with ${name} references and <redacted> marked, as spans holding text nodes.
          function marked(value) {
            const whole = text(value);
            const parts = [];
            const pattern = /\$\{[A-Za-z0-9_.-]{1,128}\}|<redacted>|<tripwire>/g;
            let last = 0;
            let match;
            while ((match = pattern.exec(whole)) !== null) {
              if (match.index > last) parts.push(whole.slice(last, match.index));
              parts.push(el('span', match[0].charAt(0) === '$' ? 'secret-ref' : 'redacted', match[0]));
              last = match.index + match[0].length;
            }
            if (last < whole.length) parts.push(whole.slice(last));
            return parts;
          }

          function secretRef(name) {
            return el('span', 'secret-ref', '${' + text(name) + '}');
          }

          function hostOf(address) {
            const value = text(address);
            const match = /^(\[[^\]]*\]|[^:]*):\d+$/.exec(value);
            return match ? match[1] : value;
          }

          function facetsOf(record) {
            const view = record.view && typeof record.view === 'object' ? record.view : {};
            const decision = text(view.decision || record.decision || 'passed');
            const scopes = typeof record.scope === 'string'
              ? record.scope.split(',').map((name) => name.trim()).filter((name) => name.length > 0) : [];
            const client = text(record.client_id || hostOf(record.client));
            const origin = text(view.origin);
            const path = text(view.path);
            const hop = Number.isInteger(view.hop) && view.hop > 0 ? view.hop : 1;
            const search = [record.method, origin, path, record.url, record.id, record.client, record.client_id,
              record.status, record.scope, decision, record.error, record.reason].map(text).join(' ').toLowerCase();
            return { decision, scopes, client, origin, path, hop, search };
          }

          function formatDuration(value) {
            if (typeof value !== 'number' || !isFinite(value)) return '';
            if (value >= 1000) return (value / 1000).toFixed(2) + ' s';
            if (value >= 100) return value.toFixed(0) + ' ms';
            return value.toFixed(1) + ' ms';
          }

          function formatTime(value) {
            const ts = text(value);
            const match = /T(\d\d:\d\d:\d\d(?:\.\d{1,3})?)/.exec(ts);
            return match ? match[1] : ts;
          }

          function requestLabel(entry) {
            const facets = entry.facets;
            if (facets.origin || facets.path) return facets.origin + facets.path;
            return text(entry.record.url) || '-';
          }

          function buildRow(entry) {
            const record = entry.record;
            const facets = entry.facets;
            const tr = el('tr');
            tr.tabIndex = -1;
            tr.setAttribute('aria-selected', 'false');
            tr.title = 'request id ' + text(record.id);
            const time = el('td', 'col-time', formatTime(record.ts));
            time.title = text(record.ts);
            const client = el('td', 'col-client', facets.client || '-');
            client.title = [text(record.client_id), text(record.client)].filter((part) => part).join(' ');
            const method = el('td', 'col-method', text(record.method) || '-');
            const request = el('td', 'col-request');
            if (facets.hop > 1) request.appendChild(el('span', 'hop', '\u21B3 hop ' + facets.hop));
            if (facets.origin) {
              request.appendChild(el('span', 'host', facets.origin));
              request.appendChild(document.createTextNode(facets.path));
            } else {
              request.appendChild(document.createTextNode(requestLabel(entry)));
            }
            request.title = requestLabel(entry);
            const statusText = record.status === null || record.status === undefined ? '-' : text(record.status);
            const status = el('td', 'col-status', statusText);
            if (/^[1-5]\d\d$/.test(statusText)) status.classList.add('status-' + statusText.charAt(0));
            const scope = el('td', 'col-scope', facets.scopes.length ? facets.scopes.join(', ') : '-');
            const decision = el('td', 'col-decision', el('span', 'decision decision-' + token(facets.decision), facets.decision));
            const duration = el('td', 'col-duration', formatDuration(record.duration_ms));
            const id = el('td', 'col-id', text(record.id));
            id.title = text(record.id);
            append(tr, [time, client, method, request, status, scope, decision, duration, id]);
            tr.addEventListener('click', () => {
              select(entry, false);
              openDetail(entry);
            });
            return tr;
          }

          function addOption(select, value) {
            if (!value || select.options.length > MAX_OPTIONS) return;
            for (const option of select.options) {
              if (option.value === value) return;
            }
            const option = new Option(value, value);
            let before = null;
            for (let index = 1; index < select.options.length; index += 1) {
              if (select.options[index].value.localeCompare(value) > 0) {
                before = select.options[index];
                break;
              }
            }
            select.insertBefore(option, before);
          }

          function countButton(decision) {
            for (const button of ui.counts.children) {
              if (button.dataset.decision === decision) return button;
            }
            const button = el('button', 'decision-' + token(decision));
            button.type = 'button';
            button.dataset.decision = decision;
            button.title = 'Show only ' + decision + ' (click again for all)';
            button.setAttribute('aria-pressed', 'false');
            append(button, [decision, el('span', 'n', '0')]);
            button.addEventListener('click', () => {
              filter.decision = filter.decision === decision ? '' : decision;
              ui.decision.value = filter.decision;
              applyFilters();
            });
            // Known decisions keep their order; others go last.
            const rank = (word) => {
              const index = KNOWN_DECISIONS.indexOf(word);
              return index < 0 ? KNOWN_DECISIONS.length : index;
            };
            let before = null;
            for (const other of ui.counts.children) {
              if (rank(other.dataset.decision) > rank(decision)) {
                before = other;
                break;
              }
            }
            ui.counts.insertBefore(button, before);
            return button;
          }

          function changeCount(decision, delta) {
            const value = Math.max(0, (counts.get(decision) || 0) + delta);
            counts.set(decision, value);
            countButton(decision).querySelector('.n').textContent = String(value);
          }

          function matches(entry) {
            const facets = entry.facets;
            if (filter.client && facets.client !== filter.client) return false;
            if (filter.origin && facets.origin !== filter.origin) return false;
            if (filter.scope && facets.scopes.indexOf(filter.scope) < 0) return false;
            if (filter.decision && facets.decision !== filter.decision) return false;
            if (filter.text && facets.search.indexOf(filter.text) < 0) return false;
            return true;
          }

          function updateShown() {
            let shown = 0;
            for (const entry of rows) {
              if (!entry.tr.hidden) shown += 1;
            }
            ui.shown.textContent = shown === rows.length ? rows.length + ' exchanges' : shown + ' of ' + rows.length + ' shown';
            ui.empty.hidden = shown > 0;
            ui.empty.textContent = rows.length === 0
              ? 'Waiting for requests through the proxy. Each exchange appears here as it ends.'
              : 'No exchange matches the filters.';
          }

          function applyFilters() {
            for (const entry of rows) entry.tr.hidden = !matches(entry);
            for (const button of ui.counts.children) {
              button.setAttribute('aria-pressed', button.dataset.decision === filter.decision ? 'true' : 'false');
            }
            updateShown();
          }

          // Records wait here for the next flush: a replay brings up to the feed's whole ring at once, and
          // a table laid out again after each of thousands of rows took seconds; one insertion per burst.
          const pending = [];
          let flushTimer = 0;

          function receive(record) {
            if (!record || typeof record !== 'object' || Array.isArray(record)) return;
            if (pending.length >= MAX_ROWS) pending.shift();
            pending.push(record);
            if (!flushTimer) flushTimer = window.setTimeout(flush, 40);
          }

          function flush() {
            flushTimer = 0;
            const batch = pending.splice(0, pending.length);
            const fragment = document.createDocumentFragment();
            let reopen = false;
            for (const record of batch) {
              const entry = add(record);
              if (!entry) continue;
              fragment.insertBefore(entry.tr, fragment.firstChild);
              if (opened && text(opened.record.id) === text(record.id)) reopen = true;
            }
            ui.rows.insertBefore(fragment, ui.rows.firstChild);
            while (rows.length > MAX_ROWS) drop(rows.pop());
            updateShown();
            // A new hop of the exchange on show: its redirect chain grows.
            if (reopen && opened) renderDetail(opened);
          }

          function add(record) {
            const key = [text(record.seq), text(record.id), text(record.ts)].join('|');
            if (seen.has(key)) return null;
            seen.add(key);
            const entry = { record, key, facets: facetsOf(record), tr: null };
            entry.tr = buildRow(entry);
            entry.tr.hidden = !matches(entry);
            rows.unshift(entry);
            const id = text(record.id);
            if (id) {
              const hops = byId.get(id) || [];
              hops.push(entry);
              byId.set(id, hops);
            }
            changeCount(entry.facets.decision, 1);
            addOption(ui.client, entry.facets.client);
            addOption(ui.origin, entry.facets.origin);
            for (const scope of entry.facets.scopes) addOption(ui.scope, scope);
            addOption(ui.decision, entry.facets.decision);
            return entry;
          }

          function drop(entry) {
            entry.tr.remove();
            seen.delete(entry.key);
            changeCount(entry.facets.decision, -1);
            const id = text(entry.record.id);
            const hops = byId.get(id);
            if (hops) {
              const left = hops.filter((other) => other !== entry);
              if (left.length) byId.set(id, left); else byId.delete(id);
            }
            if (selected === entry) selected = null;
          }

          // Selection and the keyboard.

          function select(entry, focus) {
            if (selected && selected.tr) selected.tr.setAttribute('aria-selected', 'false');
            selected = entry;
            if (!entry) return;
            entry.tr.setAttribute('aria-selected', 'true');
            if (focus) {
              entry.tr.focus({ preventScroll: true });
              entry.tr.scrollIntoView({ block: 'nearest' });
            }
          }

          function move(delta) {
            const visible = rows.filter((entry) => !entry.tr.hidden);
            if (!visible.length) return;
            let index = selected ? visible.indexOf(selected) : -1;
            index = index < 0 ? 0 : Math.min(visible.length - 1, Math.max(0, index + delta));
            select(visible[index], true);
            if (opened) openDetail(visible[index]);
          }

          function onKey(event) {
            if (event.ctrlKey || event.metaKey || event.altKey) return;
            const target = event.target;
            const tag = target && target.tagName ? target.tagName : '';
            const typing = tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA';
            if (event.key === 'Escape') {
              if (typing) {
                target.blur();
                if (selected) selected.tr.focus({ preventScroll: true });
              } else if (opened) {
                closeDetail();
              }
              event.preventDefault();
              return;
            }
            if (typing) return;
            switch (event.key) {
            case 'j':
            case 'ArrowDown':
              move(1);
              break;
            case 'k':
            case 'ArrowUp':
              move(-1);
              break;
            case 'Enter':
              // Enter on a button or a link keeps its own meaning.
              if (tag !== 'TR' && tag !== 'BODY' && target !== ui.detail) return;
              if (!selected) move(0);
              if (selected) openDetail(selected);
              break;
            case '/':
              ui.text.focus();
              ui.text.select();
              break;
            case 'c':
              if (!opened && selected) openDetail(selected);
              if (opened) copyCurl(opened);
              break;
            default:
              return;
            }
            event.preventDefault();
          }

          // The detail panel.

          function openDetail(entry) {
            opened = entry;
            renderDetail(entry);
            ui.detail.hidden = false;
            ui.main.classList.add('open');
          }

          function closeDetail() {
            opened = null;
            ui.detail.hidden = true;
            ui.detail.replaceChildren();
            ui.main.classList.remove('open');
            if (selected) selected.tr.focus({ preventScroll: true });
          }

          function section(title, content) {
            return [el('h3', null, title), content];
          }

          function none(words) {
            return el('p', 'none', words);
          }

          function headBlock(head, kind) {
            if (!head || typeof head !== 'object') return null;
            const pre = el('pre', 'head');
            if (kind === 'request') {
              append(pre, marked(head.line));
            } else {
              append(pre, 'status ' + (head.status === null || head.status === undefined ? '-' : text(head.status)));
            }
            const headers = Array.isArray(head.headers) ? head.headers : [];
            for (const pair of headers) {
              if (!Array.isArray(pair)) continue;
              append(pre, ['\n', text(pair[0]) + ': ', marked(pair[1])]);
            }
            return pre;
          }

          // The access log's header object, for a record that carries no detail.
          function logHeaders(headers) {
            if (!headers || typeof headers !== 'object') return null;
            const pre = el('pre', 'head');
            let first = true;
            for (const name of Object.keys(headers)) {
              append(pre, [first ? '' : '\n', name + ': ', marked(headers[name])]);
              first = false;
            }
            return first ? null : pre;
          }

          function list(values) {
            return Array.isArray(values) ? values.map(text).filter((value) => value) : [];
          }

          function refs(names) {
            const parts = [];
            list(names).forEach((name, index) => {
              if (index > 0) parts.push(', ');
              parts.push(secretRef(name));
            });
            return parts.length ? parts : ['no secret'];
          }

          function inScope(scope) {
            return scope ? ' (scope ' + text(scope) + ')' : '';
          }

          function because(why) {
            return why ? ': ' + text(why) : '';
          }

          const RULE_KINDS = ['inject', 'strip', 'skip', 'substitute', 'sign', 'scrub', 'guard', 'redirect', 'egress'];

          // An egress entry carries the log's egress object beside `"rule":"egress"`, whose own `rule` key
          // (`default deny`) may then be the one a JSON parser keeps: known by its destination.
          function ruleKind(rule) {
            if (RULE_KINDS.indexOf(rule.rule) >= 0) return rule.rule;
            if (rule.destination !== undefined && (rule.decision === 'deny' || rule.decision === 'report_deny')) return 'egress';
            return text(rule.rule);
          }

          function ruleWords(rule, record) {
            if (!rule || typeof rule !== 'object') return [text(rule)];
            switch (ruleKind(rule)) {
            case 'inject':
              return ['Injected ', el('code', null, text(rule.header)), ' from ', refs(rule.secrets), inScope(rule.scope)];
            case 'strip':
              return ['Removed ', el('code', null, text(rule.header)), ' from the request', because(rule.why)];
            case 'skip':
              return ['Scope ', el('code', null, text(rule.scope)), ' injected nothing', because(rule.why)];
            case 'substitute':
              return ['Replaced the placeholder of ', secretRef(rule.secret), ' with its value on the way out'];
            case 'sign':
              return ['Signed the request (', text(rule.kind), ')', inScope(rule.scope)];
            case 'scrub':
              return ['Masked ', secretRef(rule.secret), ' in the response', rule.encoding ? ' (' + text(rule.encoding) + ')' : ''];
            case 'guard':
              return ['Stopped the request: ', rule.placeholder ? 'the placeholder of ' : 'the value of ', secretRef(rule.secret),
                rule.where ? ' in ' + text(rule.where) : '', rule.encoding ? ' (' + text(rule.encoding) + ')' : ''];
            case 'redirect': {
              const where = [el('code', null, text(rule.location)), rule.origin ? ' (' + text(rule.origin) + ')' : ''];
              if (rule.decision === 'follow') return ['Followed the redirect to ', where];
              if (rule.decision === 'block') return ['Blocked the redirect to ', where, ': the client got a 502'];
              return ['Passed the redirect to ', where, ' on to the client'];
            }
            case 'egress': {
              // The egress rule's name: the record's `egress` field has it for sure (see ruleKind).
              const logged = record && record.egress && typeof record.egress === 'object' ? record.egress : {};
              const name = logged.rule || (rule.rule !== 'egress' ? rule.rule : '') || '';
              const decision = rule.decision || logged.decision;
              const verb = decision === 'report_deny' ? 'Would have refused (report mode) ' : 'Refused ';
              return [verb, 'the destination ', el('code', null, text(rule.destination || logged.destination)),
                rule.address ? ' (' + text(rule.address) + ')' : '', name ? ' by the egress rule ' + text(name) : ''];
            }
            default:
              return [text(rule.rule) + ': ', el('code', null, text(rule))];
            }
          }

          function rulesOf(record) {
            const detail = record.detail && typeof record.detail === 'object' ? record.detail : {};
            return Array.isArray(detail.rules) ? detail.rules : [];
          }

          function renderDetail(entry) {
            const record = entry.record;
            const facets = entry.facets;
            const detail = record.detail && typeof record.detail === 'object' ? record.detail : {};
            const request = detail.request && typeof detail.request === 'object' ? detail.request : {};
            const response = detail.response && typeof detail.response === 'object' ? detail.response : {};
            const parts = [];

            const close = el('button', 'close', 'Close (Esc)');
            close.type = 'button';
            close.addEventListener('click', closeDetail);
            parts.push(close);
            parts.push(el('h2', null, [text(record.method) || '-', ' ', requestLabel(entry)]));

            const facts = el('dl');
            const fact = (name, value) => {
              if (value === '' || value === null || value === undefined) return;
              append(facts, [el('dt', null, name), el('dd', null, value)]);
            };
            fact('decision', el('span', 'decision decision-' + token(facets.decision), facets.decision));
            fact('status', record.status === null || record.status === undefined ? 'none sent' : text(record.status));
            fact('time', text(record.ts));
            fact('client', [text(record.client_id), record.client_id ? ' ' : '', text(record.client)]);
            fact('scope', facets.scopes.length ? facets.scopes.join(', ') : 'none');
            fact('duration', formatDuration(record.duration_ms));
            fact('request id', text(record.id));
            fact('protocol', text(record.proto));
            fact('upstream', text(record.upstream));
            fact('error', text(record.error));
            fact('reason', text(record.reason));
            parts.push(facts);

            const rules = rulesOf(record);
            const ruleList = el('ul', 'rules');
            for (const rule of rules) ruleList.appendChild(el('li', null, ruleWords(rule, record)));
            parts.push(section('What the proxy did', rules.length ? ruleList
              : none('No rule applied: nothing was injected, stripped or refused.')));

            const hops = (byId.get(text(record.id)) || []).slice().sort((a, b) =>
              (a.facets.hop - b.facets.hop) || (Number(a.record.seq) - Number(b.record.seq)));
            if (hops.length > 1 || facets.hop > 1 || record.redirect) {
              const chain = el('p', 'chain');
              for (const hop of hops) {
                const button = el('button', null, ['hop ' + hop.facets.hop + ': ', text(hop.record.status), ' ', requestLabel(hop)]);
                button.type = 'button';
                if (hop === entry) button.setAttribute('aria-current', 'true');
                button.addEventListener('click', () => {
                  select(hop, true);
                  openDetail(hop);
                });
                chain.appendChild(button);
              }
              if (hops.length < 2) chain.appendChild(none('The other hops are not in the table any more.'));
              parts.push(section('Redirect chain', chain));
            }

            const guarded = rules.filter((rule) => rule && typeof rule === 'object' && (ruleKind(rule) === 'guard' || ruleKind(rule) === 'scrub'));
            const events = el('ul');
            for (const rule of guarded) events.appendChild(el('li', null, ruleWords(rule, record)));
            if (record.scrub_skipped) {
              events.appendChild(el('li', null, ['The response was not scanned: its encoding is ', text(record.scrub_skipped)]));
            }
            if (!guarded.length && record.guard && typeof record.guard === 'object') {
              events.appendChild(el('li', null, ['Guard: ', secretRef(record.guard.secret), ' ', text(record.guard.encoding)]));
            }
            if (!guarded.length && Array.isArray(record.scrubbed)) {
              for (const name of list(record.scrubbed)) events.appendChild(el('li', null, ['Scrubbed ', secretRef(name)]));
            }
            if (events.childNodes.length) parts.push(section('Guard and scrub', events));

            const curl = typeof detail.curl === 'string' ? detail.curl : '';
            parts.push(el('h3', null, 'Copy as curl'));
            if (curl) {
              const copy = el('button', null, 'Copy as curl (c)');
              copy.type = 'button';
              copy.id = 'copy-curl';
              copy.addEventListener('click', () => copyCurl(entry));
              parts.push(el('div', 'curl-actions', [copy, el('span', 'curl-status', '')]));
              const pre = el('pre', 'curl', marked(curl));
              pre.id = 'curl-text';
              parts.push(pre);
            } else {
              parts.push(none('No curl command for this exchange.'));
            }

            const hasDetail = request.client || request.origin || response.origin || response.client;
            if (hasDetail) {
              parts.push(el('h3', null, 'Request'));
              parts.push(el('h4', null, 'As the client sent it'), headBlock(request.client, 'request') || none('Not read.'));
              parts.push(el('h4', null, 'As the origin received it'),
                headBlock(request.origin, 'request') || none('Nothing was sent to the origin.'));
              parts.push(el('h3', null, 'Response'));
              parts.push(el('h4', null, 'As the origin sent it'),
                headBlock(response.origin, 'response') || none('No response came from the origin.'));
              parts.push(el('h4', null, 'As the client received it'),
                headBlock(response.client, 'response') || none('No response was sent to the client.'));
            } else {
              parts.push(section('Request headers (as logged)', logHeaders(record.req_headers) || none('None logged.')));
              parts.push(section('Response headers (as logged)', logHeaders(record.resp_headers) || none('None logged.')));
            }

            parts.push(section('Explain', typeof record.explain === 'string' && record.explain
              ? el('pre', 'explain', record.explain) : none('Not computable for this exchange (no origin, or a CONNECT).')));

            ui.detail.replaceChildren();
            append(ui.detail, parts);
          }

          function copyCurl(entry) {
            const detail = entry.record.detail && typeof entry.record.detail === 'object' ? entry.record.detail : {};
            const curl = typeof detail.curl === 'string' ? detail.curl : '';
            const status = ui.detail.querySelector('.curl-status');
            const say = (words) => { if (status) status.textContent = words; };
            if (!curl) return;
            const fallback = () => {
              // No clipboard API (a page not served from loopback or https, or permission refused): the text
              // in a selected textarea, copied with the old command where it still works, else by hand.
              let area = ui.detail.querySelector('textarea.curl-fallback');
              if (!area) {
                area = el('textarea', 'curl-fallback');
                area.readOnly = true;
                area.setAttribute('aria-label', 'curl command');
                const pre = ui.detail.querySelector('#curl-text');
                if (pre) pre.after(area); else ui.detail.appendChild(area);
              }
              area.value = curl;
              area.focus();
              area.select();
              let copied = false;
              try { copied = document.execCommand('copy'); } catch (error) { copied = false; }
              say(copied ? 'Copied.' : 'Selected: press Ctrl+C to copy.');
            };
            if (navigator.clipboard && window.isSecureContext) {
              navigator.clipboard.writeText(curl).then(() => say('Copied.'), fallback);
            } else {
              fallback();
            }
          }

          // The stream.

          function setState(state, words) {
            ui.connection.dataset.state = state;
            ui.connection.textContent = words || state;
            ui.notice.hidden = state !== 'unauthorized' && state !== 'refused';
            if (!ui.notice.hidden) ui.notice.textContent = words;
          }

          function connect() {
            window.clearTimeout(retryTimer);
            setState(retries ? 'reconnecting' : 'connecting', retries ? 'reconnecting' : 'connecting');
            source = new EventSource('/view/events');
            source.onopen = () => {
              retries = 0;
              setState('live', 'live');
            };
            source.onmessage = (event) => {
              let record;
              try { record = JSON.parse(event.data); } catch (error) { return; }
              receive(record);
            };
            source.onerror = () => {
              // CONNECTING: the stream ended (the proxy restarted, or dropped this viewer for being slow); the
              // browser reconnects by itself with Last-Event-ID. CLOSED: the server answered without a stream
              // (401, 403, 400): ask it once why.
              if (source.readyState === EventSource.CONNECTING) {
                setState('reconnecting', 'reconnecting');
                return;
              }
              source.close();
              probe();
            };
          }

          function probe() {
            const controller = new AbortController();
            fetch('/view/events', { cache: 'no-store', credentials: 'same-origin', signal: controller.signal })
              .then((response) => {
                controller.abort();
                if (response.status === 401) {
                  setState('unauthorized', 'unauthorized: this view needs the admin token. Open /view?token=TOKEN '
                    + '(TOKEN: the value of the secret that admin_token names), or send Authorization: Bearer TOKEN.');
                } else if (response.status === 403 || response.status === 400) {
                  setState('refused', 'refused (' + response.status + '): open the view at the admin address itself, '
                    + 'HOST:PORT/view as configured, not through another name.');
                } else {
                  later();
                }
              }, later);
          }

          function later() {
            retries += 1;
            setState('reconnecting', 'reconnecting');
            retryTimer = window.setTimeout(connect, Math.min(30000, 1000 * Math.pow(2, Math.min(retries, 5))));
          }

          // Theme.

          function effectiveTheme() {
            const chosen = document.documentElement.getAttribute('data-theme');
            if (chosen === 'dark' || chosen === 'light') return chosen;
            return window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
          }

          function showThemeButton() {
            const other = effectiveTheme() === 'dark' ? 'light' : 'dark';
            ui.theme.textContent = other === 'dark' ? 'Dark theme' : 'Light theme';
          }

          function toggleTheme() {
            const next = effectiveTheme() === 'dark' ? 'light' : 'dark';
            document.documentElement.setAttribute('data-theme', next);
            try { window.localStorage.setItem(THEME_KEY, next); } catch (error) { /* not remembered */ }
            showThemeButton();
          }

          function start() {
            const byID = (id) => document.getElementById(id);
            ui = {
              main: byID('main'), rows: byID('rows'), empty: byID('empty'), detail: byID('detail'), counts: byID('counts'),
              connection: byID('connection'), notice: byID('notice'), shown: byID('shown'), theme: byID('theme'),
              text: byID('filter-text'), client: byID('filter-client'), origin: byID('filter-origin'),
              scope: byID('filter-scope'), decision: byID('filter-decision'), form: byID('filters'), clear: byID('filter-clear'),
            };
            const bind = (select, key) => select.addEventListener('change', () => {
              filter[key] = select.value;
              applyFilters();
            });
            bind(ui.client, 'client');
            bind(ui.origin, 'origin');
            bind(ui.scope, 'scope');
            bind(ui.decision, 'decision');
            ui.text.addEventListener('input', () => {
              filter.text = ui.text.value.trim().toLowerCase();
              applyFilters();
            });
            ui.form.addEventListener('submit', (event) => event.preventDefault());
            ui.clear.addEventListener('click', () => {
              filter.text = filter.client = filter.origin = filter.scope = filter.decision = '';
              ui.text.value = ui.client.value = ui.origin.value = ui.scope.value = ui.decision.value = '';
              applyFilters();
            });
            ui.theme.addEventListener('click', toggleTheme);
            if (window.matchMedia) {
              window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', showThemeButton);
            }
            showThemeButton();
            document.addEventListener('keydown', onKey);
            updateShown();
            connect();
          }

          if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
        })();
        """#
}
