// tiktoken's own encode_ordinary, for tests/tiktoken_tokenizer_test.cpp.
// Reads one JSON object on stdin:
//   {"ranks": PATH of a .tiktoken file, "pattern": REGEX,
//    "special_tokens": {TEXT: ID}, "texts": [STRING, ...]}
// and prints {"ids": [[...], ...]}: each text's ids, in order.
import { readFileSync } from "node:fs";
import { Tiktoken } from "tiktoken/lite";

const request = JSON.parse(readFileSync(0, "utf8"));
const encoding = new Tiktoken(
  readFileSync(request.ranks, "utf8"),
  request.special_tokens,
  request.pattern,
);
const ids = request.texts.map((text) => Array.from(encoding.encode_ordinary(text)));
encoding.free();
process.stdout.write(JSON.stringify({ ids }) + "\n");
