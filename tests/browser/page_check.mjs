// Drives the page (web/page/) in Debian's chromium, headless, through
// puppeteer-core, against a real kvtierd or kvtier-router that
// tests/page_test.cpp started (cfg.mode "daemon" or "fleet"):
// every step does what a person would (types, presses Enter and Escape,
// clicks) and reads what a person would see. Prints one JSON object of
// what it saw; the C++ test asserts on it. An exception is reported as
// {"unexpected": ...}, with what was seen until then.
//
//   node page_check.mjs '{"mode", "url", "key", "chromium", "ctl", "socket", "shots", ...}'
import { execFileSync } from 'node:child_process';
import puppeteer from 'puppeteer-core';

const cfg = JSON.parse(process.argv[2]);
const seen = { requests: [], console_errors: [] };
const timeout = 60000;

const figure = (tier, name) => `#tiers [data-tier="${tier}"] [data-field="${name}"]`;
const field = (page, tier, name) =>
  page.$eval(figure(tier, name), (e) => Number(e.dataset.value)).catch(() => null);

// The panel's figure `name` of `tier` once a refresh shows it at 0 (`zero`)
// or above 0.
async function fieldOnce(page, tier, name, zero) {
  await page.waitForFunction((selector, wantZero) => {
    const e = document.querySelector(selector);
    return e !== null && (Number(e.dataset.value) === 0) === wantZero;
  }, {}, figure(tier, name), zero);
  return field(page, tier, name);
}

// The figures an answer shows, once it is done: data- attributes the page
// sets beside the text it shows.
async function answer(page, index) {
  const selector = `#log .message.assistant:nth-of-type(${2 * index + 2})`;
  await page.waitForSelector(`${selector}[data-done]`, { timeout });
  return page.$eval(selector, (e) => ({
    text: e.querySelector('.text').textContent,
    pieces: Number(e.dataset.pieces || 0),
    stopped: e.dataset.stopped === 'true',
    error: e.dataset.error || '',
    prompt_tokens: Number(e.dataset.promptTokens || 0),
    cached_tokens: Number(e.dataset.cachedTokens || 0),
    l1: Number(e.dataset.l1 || 0),
    l2: Number(e.dataset.l2 || 0),
    l3: Number(e.dataset.l3 || 0),
    computed: Number(e.dataset.computed || 0),
    ttft_ms: Number(e.dataset.ttftMs || -1),
    bar_parts: e.querySelectorAll('.bar span').length,
  }));
}

async function say(page, text) {
  await page.click('#input');
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

async function setting(page, id, value) {
  await page.$eval(`#${id}`, (e, v) => { e.value = v; }, String(value));
}

// kvtierd's page: the key, the keyboard, a chat through the tiers, a flush,
// markup, a narrow window.
async function daemonChecks(page) {
  // The key: asked for, kept for the tab only, never in the address.
  await page.goto(cfg.url, { waitUntil: 'load' });
  await page.waitForSelector('#key-dialog[open]');
  seen.asked_for_key = true;
  await page.type('#key', cfg.key);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => !document.getElementById('model').textContent.startsWith('…')
    && document.getElementById('model').textContent !== 'no model');
  seen.model = await page.$eval('#model', (e) => e.textContent);
  seen.key_in_session_storage = await page.evaluate(() => sessionStorage.getItem('kvtier-api-key'));
  seen.local_storage_items = await page.evaluate(() => localStorage.length);

  // Shift+Enter is a new line, not a send.
  await page.click('#input');
  await page.keyboard.type('one');
  await page.keyboard.down('Shift');
  await page.keyboard.press('Enter');
  await page.keyboard.up('Shift');
  await page.keyboard.type('two');
  seen.shift_enter_value = await page.$eval('#input', (e) => e.value);
  seen.messages_after_shift_enter = await page.$$eval('#log .message', (m) => m.length);
  await page.$eval('#input', (e) => { e.value = ''; });

  // Turn 1, streamed; greedy, so that the conversation is the same each run.
  await setting(page, 'temperature', 0);
  await setting(page, 'max_tokens', 40);
  await say(page, cfg.first_message);
  seen.first = await answer(page, 0);
  await page.screenshot({ path: `${cfg.shots}/page-first-answer.png` });

  // Turn 2, stopped by Escape mid-stream: the network is slowed so that the
  // answer is still arriving when a person would press it.
  const cdp = await page.createCDPSession();
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions',
    { offline: false, latency: 0, downloadThroughput: 2000, uploadThroughput: -1 });
  await setting(page, 'max_tokens', 200);
  await say(page, cfg.second_message);
  await page.waitForFunction(() => {
    const last = [...document.querySelectorAll('#log .message.assistant')].pop();
    return last && Number(last.dataset.pieces || 0) >= 3;
  });
  seen.stop_enabled_while_streaming = await page.$eval('#stop', (e) => !e.disabled);
  await page.keyboard.press('Escape');
  seen.stopped = await answer(page, 1);
  seen.send_enabled_after_stop = await page.$eval('#send', (e) => !e.disabled);
  await cdp.send('Network.emulateNetworkConditions',
    { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });

  // Turn 3: the conversation so far comes back from L1.
  await setting(page, 'max_tokens', 24);
  await say(page, cfg.third_message);
  seen.third = await answer(page, 2);

  // The tiers panel follows a flush of L1 (its blocks move down to L2).
  seen.l1_blocks_before_flush = await fieldOnce(page, 'l1', 'used_blocks', false);
  seen.l2_blocks_before_flush = await field(page, 'l2', 'used_blocks');
  execFileSync(cfg.ctl, ['--socket', cfg.socket, 'cache', 'flush', 'l1']);
  seen.l1_blocks_after_flush = await fieldOnce(page, 'l1', 'used_blocks', true);
  seen.l2_blocks_after_flush = await field(page, 'l2', 'used_blocks');

  // Turn 4: the conversation comes back from L2.
  await say(page, cfg.fourth_message);
  seen.fourth = await answer(page, 3);
  // The tiers panel and the daemon's TTFT by source, once refreshed.
  await page.waitForSelector('#ttft tbody tr[data-source="l2"]');
  seen.ttft_rows = await page.$$eval('#ttft tbody tr', (rows) => rows.map((r) => r.dataset.source));
  seen.l2_hits_after_fourth = await field(page, 'l2', 'hits');
  await page.screenshot({ path: `${cfg.shots}/page.png` });

  // Text that is HTML stays text: the user's, and a model's. No bundled
  // model writes markup on demand, so the one answer that does is served by
  // the browser itself (request interception), in the daemon's own stream
  // format; everything else on this page is the daemon's.
  const markup = '<img src=x onerror="window.__kvtier_pwned=1"><b>bold</b>';
  await page.click('#new');
  await page.setRequestInterception(true);
  const intercept = (r) => {
    if (r.isInterceptResolutionHandled()) return;
    if (!r.url().endsWith('/v1/chat/completions')) return r.continue();
    const chunk = (delta) => `data: ${JSON.stringify({ object: 'chat.completion.chunk',
      choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
    r.respond({ status: 200, contentType: 'text/event-stream',
      body: chunk({ role: 'assistant' }) + chunk({ content: markup }) + 'data: [DONE]\n\n' });
  };
  page.on('request', intercept);
  await say(page, markup);
  const html = await answer(page, 0);
  seen.markup = {
    user_text: await page.$eval('#log .message.user .text', (e) => e.textContent),
    answer_text: html.text,
    elements_in_log: await page.$$eval('#log img, #log b', (e) => e.length),
    script_ran: await page.evaluate(() => window.__kvtier_pwned === 1),
  };
  page.off('request', intercept);
  await page.setRequestInterception(false);

  // A turn the daemon refuses: its message shown, the turn dropped, and the
  // conversation goes on.
  await setting(page, 'max_tokens', -5);
  await say(page, 'Refused?');
  seen.refused = await answer(page, 1);
  await setting(page, 'max_tokens', 8);
  await say(page, 'And now?');
  seen.after_refusal = await answer(page, 2);

  // A narrow window: one column, nothing wider than the window.
  await page.setViewport({ width: 420, height: 860 });
  seen.narrow_overflow_px = await page.evaluate(
    () => document.documentElement.scrollWidth - window.innerWidth);
  await page.screenshot({ path: `${cfg.shots}/page-narrow.png`, fullPage: true });
  seen.page_url = page.url();
}

// kvtier-router's page: the fleet, and a conversation routed to the daemon
// that holds it.
async function fleetChecks(page) {
  await page.goto(cfg.url, { waitUntil: 'load' });
  await page.waitForFunction(() => document.getElementById('side-title').textContent === 'Fleet'
    && document.querySelectorAll('#tiers [data-daemon]').length > 0);
  await page.waitForFunction(() => !document.getElementById('model').textContent.startsWith('…'));
  seen.side_title = await page.$eval('#side-title', (e) => e.textContent);
  seen.daemons = await page.$$eval('#tiers [data-daemon]', (cards) => cards.map((c) => c.dataset.daemon));
  await setting(page, 'temperature', 0);
  await setting(page, 'max_tokens', 16);
  await say(page, cfg.first_message);
  seen.first = await answer(page, 0);
  // The router learns what a daemon holds from its cache events: the turn
  // goes on once the panel shows the first turn's blocks held.
  await page.waitForFunction(() => [...document.querySelectorAll('#tiers [data-field="blocks"]')]
    .some((e) => (JSON.parse(e.dataset.value || '{}').l1 || 0) > 0));
  await say(page, cfg.second_message);
  seen.second = await answer(page, 1);
  await page.waitForFunction(() => document.querySelectorAll('#routes tbody tr').length >= 2);
  seen.routes = await page.$$eval('#routes tbody tr', (rows) => rows.map((r) => ({
    daemon: r.cells[0].textContent, reason: r.dataset.reason })));
  seen.routed = await page.$$eval('#tiers [data-daemon] [data-field="routed"]',
    (cells) => cells.map((c) => Number(c.dataset.value)));
  await page.screenshot({ path: `${cfg.shots}/page-fleet.png` });
}

const browser = await puppeteer.launch({
  executablePath: cfg.chromium,
  headless: true,
  // Root has no user namespace sandbox here; the page is our own.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(timeout);
  await page.setViewport({ width: 1280, height: 860 });
  page.on('request', (r) => seen.requests.push(r.url()));
  // Chromium logs every refused request as an error: the 401s before the
  // key is given and the 400 of the turn the daemon refuses are expected;
  // anything else (a refusal by our Content-Security-Policy, a script error)
  // is not.
  const expected = /status of (401|400) /;
  page.on('console', (m) => {
    if (m.type() === 'error' && !expected.test(m.text())) seen.console_errors.push(m.text());
  });
  page.on('pageerror', (e) => seen.console_errors.push(String(e)));
  if (cfg.mode === 'fleet') await fleetChecks(page);
  else await daemonChecks(page);
} catch (e) {
  seen.unexpected = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
process.stdout.write(`${JSON.stringify(seen)}\n`);
