// OpenAI's official Node.js client library against a running kvtierd's
// HTTP API: node client.mjs BASE_URL API_KEY MODEL. Prints one JSON object
// with what each call gave (tests/openai_client_test.cpp compares it with
// the daemon's JSON-RPC answers); exits 1 if a call failed unexpectedly.
import OpenAI from "openai";

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const prompt = "Q: What is the difference between a cat and a lion? A:";
const out = {};

// The class of the error a call raised, or null if it did not raise.
async function raised(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return e.constructor.name;
  }
}

try {
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  const c = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0 });
  out.completion = { text: c.choices[0].text, finish_reason: c.choices[0].finish_reason,
                     usage: c.usage };

  const stream = await client.completions.create({
    model, prompt, max_tokens: 16, temperature: 0.8, seed: 3, stream: true,
    stream_options: { include_usage: true } });
  out.streamed = { pieces: [], usage: null };
  for await (const chunk of stream) {
    if (chunk.usage) out.streamed.usage = chunk.usage;
    for (const choice of chunk.choices) if (choice.text) out.streamed.pieces.push(choice.text);
  }

  const chat = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "What is love?" }], max_tokens: 12,
    temperature: 0 });
  out.chat = { role: chat.choices[0].message.role, content: chat.choices[0].message.content };

  const chatStream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "What is love?" }], max_tokens: 12,
    temperature: 0, stream: true });
  let content = "";
  for await (const chunk of chatStream) content += chunk.choices[0]?.delta?.content ?? "";
  out.chat_streamed = content;

  const many = await client.completions.create({ model, prompt, max_tokens: 5, n: 3,
                                                 temperature: 0.9, seed: 5 });
  out.n = many.choices.map((ch) => ch.index);

  out.bad_parameter = await raised(() =>
    client.completions.create({ model, prompt, temperature: -1 }));
  out.missing_model = await raised(() =>
    client.completions.create({ model: "no-such-model", prompt }));
  out.wrong_key = await raised(() =>
    new OpenAI({ baseURL, apiKey: "not-the-key-0123456789", maxRetries: 0 }).models.list());
} catch (e) {
  out.unexpected = `${e.constructor.name}: ${e.message}`;
}
console.log(JSON.stringify(out));
process.exit(out.unexpected ? 1 : 0);
