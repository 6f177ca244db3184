// cllm serve's chat page: a conversation streamed from the same origin's
// /v1/chat/completions, kept in the browser's localStorage (the API key in
// sessionStorage: this tab only). Model text reaches the page only as text
// nodes: the small markdown renderer below builds elements itself and never
// parses a string as HTML.
'use strict';

(() => {
  const STORE = 'cllm-chat';
  const KEY_STORE = 'cllm-chat-key';
  // sampling fields sent when set (empty: the server's default)
  const FIELDS = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];
  const INTEGERS = new Set(['top_k', 'max_tokens', 'seed']);

  const $ = (id) => document.getElementById(id);
  const make = (tag, cls) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    return e;
  };

  let state = load();
  let running = null; // {controller} while an answer streams
  let modelId = null;

  // ---- storage ----------------------------------------------------------

  function load() {
    try {
      const s = JSON.parse(localStorage.getItem(STORE) || 'null');
      if (s && Array.isArray(s.messages)) {
        const ok = (m) => m && (m.role === 'user' || m.role === 'assistant') &&
          typeof m.content === 'string';
        return {
          messages: s.messages.filter(ok),
          settings: s.settings && typeof s.settings === 'object' ? s.settings : {},
        };
      }
    } catch (e) {
      // unreadable: start afresh
    }
    return { messages: [], settings: {} };
  }

  function save() {
    try {
      localStorage.setItem(STORE, JSON.stringify(state));
    } catch (e) {
      showError('the conversation cannot be kept: ' + e.message);
    }
  }

  // ---- markdown ---------------------------------------------------------

  // Links only to these schemes; anything else stays text.
  function safeUrl(u) {
    try {
      const url = new URL(u, location.href);
      return ['http:', 'https:', 'mailto:'].includes(url.protocol) ? url.href : null;
    } catch (e) {
      return null;
    }
  }

  // Inline spans of `text` appended to `parent`: `code`, **bold**, __bold__,
  // *italic*, _italic_, [text](url).
  function inline(parent, text, depth) {
    const re = new RegExp(
      '`([^`\\n]+)`' +
      '|\\*\\*(?=\\S)(.*?\\S)\\*\\*' +
      '|(?<![\\w])__(?=\\S)(.*?\\S)__(?![\\w])' +
      '|\\*(?=[^\\s*])([^*]*?[^\\s*]|[^\\s*])\\*' +
      '|(?<![\\w])_(?=[^\\s_])([^_]*?[^\\s_]|[^\\s_])_(?![\\w])' +
      '|\\[([^\\]\\n]+)\\]\\(([^()\\s]+)\\)', 'g');
    let last = 0;
    let m;
    while ((m = re.exec(text)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      last = re.lastIndex;
      let e;
      if (m[1] !== undefined) {
        e = make('code');
        e.textContent = m[1];
      } else if (m[2] !== undefined || m[3] !== undefined || m[4] !== undefined ||
                 m[5] !== undefined) {
        const bold = m[2] !== undefined || m[3] !== undefined;
        e = make(bold ? 'strong' : 'em');
        const inner = m[2] ?? m[3] ?? m[4] ?? m[5];
        if (depth < 3) inline(e, inner, depth + 1);
        else e.textContent = inner;
      } else {
        const href = safeUrl(m[7]);
        if (!href) {
          parent.appendChild(document.createTextNode(m[0]));
          continue;
        }
        e = make('a');
        e.href = href;
        e.rel = 'noopener noreferrer';
        e.target = '_blank';
        if (depth < 3) inline(e, m[6], depth + 1);
        else e.textContent = m[6];
      }
      parent.appendChild(e);
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  const LIST_ITEM = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;

  // `text` as markdown into `el`: fenced code blocks (also one not closed
  // yet, while it streams), lists, headings, paragraphs.
  function renderMarkdown(el, text) {
    el.replaceChildren();
    const lines = text.split('\n');
    let para = [];
    const flush = () => {
      if (!para.length) return;
      const p = make('p');
      para.forEach((l, k) => {
        if (k) p.appendChild(make('br'));
        inline(p, l, 0);
      });
      el.appendChild(p);
      para = [];
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/.exec(line);
      if (fence) {
        flush();
        const mark = fence[1];
        const body = [];
        i++;
        while (i < lines.length) {
          const t = lines[i].trim();
          if (t.length >= mark.length && t === mark[0].repeat(t.length)) break;
          body.push(lines[i++]);
        }
        i++; // the closing fence
        const pre = make('pre');
        const code = make('code', fence[2] ? 'language-' + fence[2] : '');
        code.textContent = body.join('\n');
        pre.appendChild(code);
        el.appendChild(pre);
        continue;
      }
      const item = LIST_ITEM.exec(line);
      if (item) {
        flush();
        const ordered = /\d/.test(item[1][0]);
        const list = make(ordered ? 'ol' : 'ul');
        if (ordered && parseInt(item[1], 10) !== 1) list.start = parseInt(item[1], 10);
        while (i < lines.length) {
          const it = LIST_ITEM.exec(lines[i]);
          if (!it || /\d/.test(it[1][0]) !== ordered) break;
          const li = make('li');
          inline(li, it[2], 0);
          list.appendChild(li);
          i++;
        }
        el.appendChild(list);
        continue;
      }
      const h = /^(#{1,6})\s+(.*)$/.exec(line);
      if (h) {
        flush();
        const e = make('h' + Math.min(6, h[1].length + 2));
        inline(e, h[2], 0);
        el.appendChild(e);
        i++;
        continue;
      }
      if (!line.trim()) flush();
      else para.push(line);
      i++;
    }
    flush();
  }

  // ---- the conversation -------------------------------------------------

  function renderBody(el, msg) {
    const body = el.querySelector('.body');
    if (msg.role === 'assistant') renderMarkdown(body, msg.content);
    else body.textContent = msg.content;
    let note = el.querySelector('.note');
    if (msg.note) {
      if (!note) el.appendChild((note = make('div', 'note')));
      note.textContent = '(' + msg.note + ')';
    } else if (note) {
      note.remove();
    }
  }

  function addMessage(msg) {
    const el = make('div', 'msg ' + msg.role);
    const role = make('div', 'role');
    role.textContent = msg.role;
    el.append(role, make('div', 'body'));
    renderBody(el, msg);
    $('chat').appendChild(el);
    return el;
  }

  function renderAll() {
    $('chat').replaceChildren();
    state.messages.forEach(addMessage);
    scrollDown();
  }

  function scrollDown() {
    const c = $('chat');
    c.scrollTop = c.scrollHeight;
  }

  function showError(text) {
    $('error').textContent = text;
  }

  function setBusy(busy) {
    $('send').disabled = busy;
    $('stop').disabled = !busy;
  }

  function showStats(tokens, tFirst, tLast, t0, done) {
    const s = $('stats');
    const parts = [tokens + ' token' + (tokens === 1 ? '' : 's')];
    if (tokens > 1 && tLast > tFirst) {
      parts.push(((tokens - 1) / ((tLast - tFirst) / 1000)).toFixed(1) + ' tokens/s');
    }
    if (tFirst) parts.push('first after ' + ((tFirst - t0) / 1000).toFixed(2) + ' s');
    s.textContent = parts.join(' \u00b7 ');
    s.dataset.tokens = String(tokens);
    s.dataset.done = done ? '1' : '0';
  }

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    const key = $('api_key').value.trim();
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }

  async function errorText(resp) {
    try {
      const j = await resp.json();
      if (j && j.error && j.error.message) return resp.status + ': ' + j.error.message;
    } catch (e) {
      // not JSON
    }
    return 'HTTP ' + resp.status;
  }

  // The sampling fields set in the settings, as numbers.
  function sampling() {
    const out = {};
    for (const f of FIELDS) {
      const v = String(state.settings[f] ?? '').trim();
      if (!v) continue;
      const n = Number(v);
      if (!Number.isFinite(n) || (INTEGERS.has(f) && !Number.isInteger(n))) {
        throw new Error(f + ': "' + v + '" is not a ' + (INTEGERS.has(f) ? 'whole ' : '') +
                        'number');
      }
      out[f] = n;
    }
    return out;
  }

  function requestMessages(upTo) {
    const out = [];
    const sys = String(state.settings.system ?? '').trim();
    if (sys) out.push({ role: 'system', content: sys });
    for (const m of state.messages.slice(0, upTo)) {
      if (m.content) out.push({ role: m.role, content: m.content });
    }
    return out;
  }

  async function send(text) {
    showError('');
    let body;
    try {
      body = Object.assign({ stream: true, stream_options: { include_usage: true } }, sampling());
    } catch (e) {
      showError(e.message);
      return false;
    }
    const user = { role: 'user', content: text };
    const msg = { role: 'assistant', content: '' };
    state.messages.push(user);
    addMessage(user);
    body.messages = requestMessages();
    if (modelId) body.model = modelId;
    state.messages.push(msg);
    const el = addMessage(msg);
    el.classList.add('running');
    scrollDown();
    save();

    const controller = new AbortController();
    running = { controller };
    setBusy(true);
    const t0 = performance.now();
    let tFirst = 0;
    let tLast = 0;
    let pieces = 0;
    let usage = null;
    let finish = null;
    showStats(0, 0, 0, t0, false);
    try {
      const resp = await fetch('/v1/chat/completions', {
        method: 'POST', headers: headers(), body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!resp.ok) throw new Error(await errorText(resp));
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).replace(/\r$/, '');
          buf = buf.slice(nl + 1);
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (!data || data === '[DONE]') continue;
          const ev = JSON.parse(data);
          if (ev.error) throw new Error(ev.error.message || 'the server failed');
          if (ev.usage) usage = ev.usage;
          const ch = ev.choices && ev.choices[0];
          if (!ch) continue;
          const piece = ch.delta && ch.delta.content;
          if (piece) {
            tLast = performance.now();
            if (!tFirst) tFirst = tLast;
            pieces++;
            msg.content += piece;
            renderBody(el, msg);
            showStats(pieces, tFirst, tLast, t0, false);
            scrollDown();
          }
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      if (finish === 'length') msg.note = 'max tokens reached';
    } catch (e) {
      if (e.name === 'AbortError') {
        msg.note = 'stopped';
      } else {
        msg.note = 'error: ' + e.message;
        showError(e.message);
      }
    }
    running = null;
    el.classList.remove('running');
    // nothing came back (a refused request): the turn is taken back, its
    // text returned to the box
    const at = state.messages.indexOf(user);
    if (!msg.content && msg.note !== 'stopped' && at >= 0) {
      state.messages.splice(at, 2);
      renderAll();
      if (!$('input').value) $('input').value = text;
    } else {
      renderBody(el, msg);
    }
    save();
    showStats(usage ? usage.completion_tokens : pieces, tFirst, tLast, t0, true);
    setBusy(false);
    return true;
  }

  async function loadModel() {
    try {
      const resp = await fetch('/v1/models', { headers: headers() });
      if (resp.status === 401) {
        $('model').textContent = 'API key required (settings)';
        modelId = null;
        return;
      }
      if (!resp.ok) throw new Error(await errorText(resp));
      const j = await resp.json();
      modelId = j.data && j.data[0] ? j.data[0].id : null;
      $('model').textContent = modelId || '';
    } catch (e) {
      $('model').textContent = 'models: ' + e.message;
    }
  }

  // ---- wiring -----------------------------------------------------------

  function init() {
    for (const f of ['system', ...FIELDS]) {
      const input = $(f);
      input.value = state.settings[f] ?? '';
      input.addEventListener('input', () => {
        state.settings[f] = input.value;
        save();
      });
    }
    const key = $('api_key');
    key.value = sessionStorage.getItem(KEY_STORE) || '';
    key.addEventListener('change', () => {
      sessionStorage.setItem(KEY_STORE, key.value.trim());
      loadModel();
    });
    $('composer').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const text = $('input').value.trim();
      if (!text || running) return;
      $('input').value = '';
      send(text);
    });
    $('input').addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        $('composer').requestSubmit();
      }
    });
    $('stop').addEventListener('click', () => {
      if (running) running.controller.abort();
    });
    $('clear').addEventListener('click', () => {
      if (running) running.controller.abort();
      state.messages = [];
      save();
      renderAll();
      showError('');
      $('stats').textContent = '';
    });
    renderAll();
    loadModel();
  }

  init();
})();
