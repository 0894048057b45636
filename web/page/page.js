// kvtier's page (web/page_files.h): a chat streamed from
// /v1/chat/completions, each answer with its time to first token, its
// tokens per second and its prompt's tokens by source (usage's
// kvtier_cached_tokens: L1, L2, L3, remote; the rest computed), and the
// tiers as GET /tiers reports them, refreshed every REFRESH_MS. Served by
// kvtier-router (its /health names its daemons), the side shows the fleet
// instead, from GET /fleet: each daemon's load and the blocks it holds by
// tier, and where the last requests went and why.
//
// The page only uses the API any client does, under the same key and
// limits. Every text from the model or the server goes into the page as
// text (textContent), never as HTML. The API key, where the server asks
// for one (401), is kept in sessionStorage: this tab's session only.
'use strict';

const SOURCES = ['l1', 'l2', 'l3', 'remote', 'computed'];
const SOURCE_NAMES = { l1: 'L1', l2: 'L2', l3: 'L3', remote: 'remote', computed: 'computed' };
const KEY_ITEM = 'kvtier-api-key';
const REFRESH_MS = 1500;

const $ = (id) => document.getElementById(id);

const state = {
  model: null,        // the id /v1/models gives
  messages: [],       // the conversation, sent whole with each turn
  running: null,      // the AbortController of the answer being streamed
  lastTiers: null,    // the previous /tiers answer, for the moves since
  fleet: false,       // served by kvtier-router
};

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// An element with a class and a text, the only way text enters the page.
function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setStatus(text) {
  $('status').textContent = text;
}

// fetch() with the API key where there is one; a refusal becomes an
// ApiError carrying the server's own message (OpenAI's error object).
async function api(path, init = {}) {
  const headers = new Headers(init.headers);
  const key = sessionStorage.getItem(KEY_ITEM);
  if (key) headers.set('Authorization', `Bearer ${key}`);
  const r = await fetch(path, { ...init, headers, cache: 'no-store' });
  if (r.ok) return r;
  let message = `${r.status} ${r.statusText}`;
  try {
    const body = await r.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (_) {
    // not JSON: keep the status line
  }
  if (r.status === 401) askForKey();
  throw new ApiError(r.status, message);
}

function askForKey() {
  const dialog = $('key-dialog');
  if (!dialog.open) dialog.showModal();
}

// The data of each server-sent event of `body`, as they arrive.
async function* events(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) yield data;
    }
  }
}

// ---- the chat ----

function addMessage(role, text) {
  const box = el('div', `message ${role}`);
  box.append(el('div', 'who', role), el('div', 'text', text));
  $('log').append(box);
  box.scrollIntoView({ block: 'end' });
  return box;
}

function numberSetting(id) {
  const v = Number($(id).value);
  return Number.isFinite(v) ? v : undefined;
}

// The prompt's tokens by source, from the usage of one answer.
function promptSources(usage) {
  const cached = usage.kvtier_cached_tokens || {};
  const counts = { l1: 0, l2: 0, l3: 0, remote: 0 };
  let total = 0;
  for (const s of Object.keys(counts)) {
    counts[s] = Number(cached[s]) || 0;
    total += counts[s];
  }
  counts.computed = Math.max(0, (Number(usage.prompt_tokens) || 0) - total);
  return counts;
}

function sourceBar(counts) {
  const total = SOURCES.reduce((sum, s) => sum + counts[s], 0);
  const bar = el('div', 'bar');
  bar.setAttribute('role', 'img');
  bar.setAttribute('aria-label', SOURCES.map((s) => `${SOURCE_NAMES[s]} ${counts[s]}`).join(', '));
  for (const s of SOURCES) {
    if (!counts[s] || !total) continue;
    const part = el('span', s);
    part.style.width = `${(100 * counts[s]) / total}%`;
    part.title = `${SOURCE_NAMES[s]}: ${counts[s]} tokens`;
    bar.append(part);
  }
  return bar;
}

// What an answer shows under its text: TTFT, tokens/s and, with usage, the
// prompt's tokens by source. The figures also go into data- attributes, so
// a test reads what a person sees.
function showAnswerFigures(box, figures) {
  const meta = el('div', 'meta');
  if (figures.ttftMs !== null) {
    meta.append(el('span', '', `TTFT ${figures.ttftMs.toFixed(0)} ms`));
    box.dataset.ttftMs = figures.ttftMs.toFixed(1);
  }
  if (figures.tokensPerSecond !== null)
    meta.append(el('span', '', `${figures.tokensPerSecond.toFixed(1)} tokens/s`));
  box.append(meta);
  if (!figures.usage) return;
  const counts = promptSources(figures.usage);
  const cached = counts.l1 + counts.l2 + counts.l3 + counts.remote;
  box.dataset.promptTokens = figures.usage.prompt_tokens;
  box.dataset.cachedTokens = cached;
  for (const s of SOURCES) box.dataset[s] = counts[s];
  const parts = SOURCES.filter((s) => counts[s] > 0).map((s) => `${SOURCE_NAMES[s]} ${counts[s]}`);
  meta.append(el('span', '', `prompt ${figures.usage.prompt_tokens} tokens: ${parts.join(', ')}`));
  box.append(sourceBar(counts));
}

function setRunning(controller) {
  state.running = controller;
  $('send').disabled = controller !== null;
  $('stop').disabled = controller === null;
}

async function send() {
  const text = $('input').value;
  if (!text.trim() || state.running || !state.model) return;
  $('input').value = '';
  state.messages.push({ role: 'user', content: text });
  addMessage('user', text);
  const box = addMessage('assistant', '');
  const textNode = box.querySelector('.text');
  const controller = new AbortController();
  setRunning(controller);
  setStatus('');

  const body = {
    model: state.model,
    messages: state.messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  for (const id of ['temperature', 'top_k', 'max_tokens']) {
    const v = numberSetting(id);
    if (v !== undefined && $(id).value !== '') body[id] = v;
  }

  const started = performance.now();
  let first = null;
  let last = null;
  let pieces = 0;
  let usage = null;
  let content = '';
  let failed = false;
  try {
    const r = await api('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    for await (const data of events(r.body)) {
      if (data === '[DONE]') break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(chunk.error.code || 500, chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      const piece = choice && choice.delta && choice.delta.content;
      if (!piece) continue;
      last = performance.now();
      if (first === null) first = last;
      pieces += 1;
      content += piece;
      textNode.textContent = content;
      box.dataset.pieces = pieces;
      box.scrollIntoView({ block: 'end' });
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      box.dataset.stopped = 'true';
      box.append(el('div', 'stopped', 'stopped'));
    } else {
      failed = true;
      box.classList.add('error');
      box.dataset.error = e.message;
      textNode.textContent = content ? `${content}\n[${e.message}]` : e.message;
    }
  } finally {
    setRunning(null);
  }
  if (failed && !content) {
    state.messages.pop();  // the turn never happened: the next one replaces it
    box.dataset.done = 'true';
    return;
  }
  // A stopped answer stays in the conversation as far as it went, as the
  // turns must alternate.
  state.messages.push({ role: 'assistant', content });
  const tokens = usage ? usage.completion_tokens : pieces;
  const seconds = first !== null && last !== null ? (last - first) / 1000 : 0;
  showAnswerFigures(box, {
    ttftMs: first === null ? null : first - started,
    // A stopped answer's pace is the network's, not the model's.
    tokensPerSecond: tokens > 1 && seconds > 0 && !box.dataset.stopped ? (tokens - 1) / seconds : null,
    usage,
  });
  box.dataset.done = 'true';
}

function stop() {
  if (state.running) state.running.abort();
}

function newConversation() {
  stop();
  state.messages = [];
  $('log').replaceChildren();
  $('input').focus();
}

// ---- the tiers ----

function formatBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// A card's figures: [field, label, text] rows shown as text, each with its
// field's raw value from `values` in data-value (JSON for an object), for a
// test to read.
function figureList(fields, values) {
  const list = el('dl');
  for (const [field, label, text] of fields) {
    const dd = el('dd', '', text);
    dd.dataset.field = field;
    const v = values[field];
    dd.dataset.value = typeof v === 'object' ? JSON.stringify(v) : v;
    list.append(el('dt', '', label), dd);
  }
  return list;
}

// One tier's card: occupancy, its share of the blocks requests asked for,
// and its moves (with those since the last refresh).
function tierCard(name, t, before, requested) {
  const card = el('div', 'tier');
  card.dataset.tier = name;
  const off = !t.capacity_blocks && !t.used_blocks && !t.nodes;
  const title = el('div', 'name');
  title.append(el('span', `swatch ${name}`), SOURCE_NAMES[name]);
  if (off) title.append(' ', el('span', 'off', 'not configured'));
  else if (!t.available) title.append(' ', el('span', 'off', 'unavailable (breaker open)'));
  card.append(title);
  if (off) return card;
  if (t.capacity_blocks) {
    const bar = el('div', 'bar');
    const used = el('span', name);
    used.style.width = `${Math.min(100, (100 * t.used_blocks) / t.capacity_blocks)}%`;
    bar.append(used);
    card.append(bar);
  }
  const since = (field) => (before ? t[field] - before[field] : 0);
  const fields = [
    ['used_blocks', 'blocks', t.capacity_blocks ? `${t.used_blocks} / ${t.capacity_blocks}` : `${t.used_blocks}`],
    ['used_bytes', 'bytes', formatBytes(t.used_blocks * t.block_bytes)],
    ['hits', 'hits', `${t.hits} (${requested ? ((100 * t.hits) / requested).toFixed(0) : 0}%)`],
    ['promotions', 'moved up', `${t.promotions}${since('promotions') ? ` +${since('promotions')}` : ''}`],
    ['demotions', 'moved in', `${t.demotions}${since('demotions') ? ` +${since('demotions')}` : ''}`],
    ['bytes_out', 'bytes out', formatBytes(t.bytes_out)],
    ['dropped', 'dropped', String(t.dropped)],
    ['checksum_failures', 'bad checksums', String(t.checksum_failures)],
  ];
  card.append(figureList(fields, { ...t, used_bytes: t.used_blocks * t.block_bytes }));
  return card;
}

// The daemon's TTFT by where most of each prompt came from (/tiers's
// ttft_by_source), for the sources that served a request.
function showTtft(bySource) {
  const rows = [];
  for (const s of SOURCES) {
    const e = bySource && bySource[s];
    if (!e || !e.requests) continue;
    const row = el('tr');
    row.dataset.source = s;
    const name = el('td');
    name.append(el('span', `swatch ${s}`), SOURCE_NAMES[s]);
    row.append(name, el('td', '', String(e.requests)), el('td', '', `${e.mean_ms.toFixed(0)} ms`));
    rows.push(row);
  }
  $('ttft').tBodies[0].replaceChildren(...rows);
}

function showTiers(answer) {
  const tiers = answer.tiers || {};
  const names = SOURCES.filter((s) => tiers[s]);
  // A tier's hit share: of the full prompt blocks requests asked the cache
  // for, those it handed over.
  const requested = names.reduce((sum, s) => sum + tiers[s].hits, 0) + (answer.missed_blocks || 0);
  const before = state.lastTiers ? state.lastTiers.tiers || {} : {};
  const cards = names.map((s) => tierCard(s, tiers[s], before[s], requested));
  const missed = el('p', 'hint', `${answer.missed_blocks || 0} prompt blocks no tier had (computed)`);
  $('tiers').replaceChildren(...cards, missed);
  showTtft(answer.ttft_by_source);
  state.lastTiers = answer;
}

// ---- the fleet (kvtier-router) ----

// "L1 3, L2 1" (each count times `scale`), or "none".
function tierCounts(byTier, scale = 1) {
  return SOURCES.filter((s) => byTier && byTier[s]).map((s) => `${SOURCE_NAMES[s]} ${byTier[s] * scale}`)
    .join(', ') || 'none';
}

function daemonCard(d) {
  const card = el('div', 'tier');
  card.dataset.daemon = d.address;
  const title = el('div', 'name', d.address);
  if (!d.usable) title.append(' ', el('span', 'off', `unusable${d.last_error ? `: ${d.last_error}` : ''}`));
  card.append(title);
  const fields = [
    ['pending', 'requests now', String(d.pending)],
    ['backlog_rows', 'rows to prefill', String(d.backlog_rows)],
    ['routed', 'routed here', String(d.routed)],
    ['blocks', 'blocks held', tierCounts(d.blocks)],
    ['downs', 'went away', String(d.downs)],
  ];
  card.append(figureList(fields, d));
  return card;
}

function showFleet(fleet) {
  const cards = (fleet.daemons || []).map(daemonCard);
  const choices = fleet.choices || {};
  const summary = el('p', 'hint', `choices: prefix ${choices.prefix || 0}, load ${choices.load || 0}, ` +
    `cold ${choices.cold || 0}, retried ${choices.retried || 0}, unrouted ${choices.unrouted || 0}`);
  $('tiers').replaceChildren(...cards, summary);
  const body = $('routes').tBodies[0];
  body.replaceChildren(...(fleet.recent || []).map((r) => {
    const row = el('tr');
    row.dataset.reason = r.reason;
    row.append(el('td', '', r.daemon), el('td', '', r.reason), el('td', '', `${r.prompt_tokens} tokens`),
      el('td', '', tierCounts(r.held_blocks, fleet.page_size || 1)));
    return row;
  }));
}

async function refreshTiers() {
  try {
    const r = await api(state.fleet ? '/fleet' : '/tiers');
    if (state.fleet) showFleet(await r.json());
    else showTiers(await r.json());
  } catch (e) {
    $('tiers').replaceChildren(el('p', 'hint', e.message));
  }
}

// ---- start ----

async function loadModel() {
  try {
    const r = await api('/v1/models');
    const models = await r.json();
    const model = models.data && models.data[0];
    state.model = model ? model.id : null;
    $('model').textContent = model ? `${model.id} (context ${model.max_model_len} tokens)` : 'no model';
    document.title = model ? `kvtier: ${model.id}` : 'kvtier';
  } catch (e) {
    setStatus(e.message);
  }
}

// Which server this is: kvtier-router's /health names its daemons. /health
// needs no key.
async function findServer() {
  try {
    const r = await fetch('/health', { cache: 'no-store' });
    state.fleet = 'daemons' in (await r.json());
  } catch (_) {
    state.fleet = false;
  }
  $('side-title').textContent = state.fleet ? 'Fleet' : 'Tiers';
  $('side').setAttribute('aria-label', state.fleet ? 'fleet' : 'tiers');
  $('fleet-routes').hidden = !state.fleet;
  $('ttft-panel').hidden = state.fleet;
}

async function start() {
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.running) {
      e.preventDefault();
      stop();
    }
  });
  $('stop').addEventListener('click', stop);
  $('new').addEventListener('click', newConversation);
  $('key-form').addEventListener('submit', () => {
    const key = $('key').value.trim();
    $('key').value = '';
    if (key) sessionStorage.setItem(KEY_ITEM, key);
    loadModel();
    refreshTiers();
  });
  $('input').focus();
  await findServer();
  loadModel();
  refreshTiers();
  setInterval(refreshTiers, REFRESH_MS);
}

start();
