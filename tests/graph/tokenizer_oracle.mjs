// The oracle of tests/graph/tokenizer_test.cpp: Hugging Face's JavaScript tokenizers (@huggingface/tokenizers,
// fetched by scripts/fetch-tokenizers) run on the same tokenizer.json and the same inputs.
// Usage: node tokenizer_oracle.mjs MODULE_DIR TOKENIZER_JSON CASES_JSON OUT_JSON
//   CASES_JSON: {"texts": [string, ...], "id_lists": [[id, ...], ...]}
//   OUT_JSON:   {"with_specials": [[id, ...], ...], "without_specials": [...], "decoded": [string, ...],
//                "decoded_skipping_specials": [...]}   (one entry per text, then per id list)
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [moduleDir, tokenizerPath, casesPath, outPath] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(`${moduleDir}/dist/tokenizers.mjs`).href);
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const cases = JSON.parse(readFileSync(casesPath, "utf8"));
const decodeOptions = (skip) => ({ skip_special_tokens: skip, clean_up_tokenization_spaces: false });
// The library refuses an empty list; the text of no tokens is "".
const decode = (ids, skip) => (ids.length ? tokenizer.decode(ids, decodeOptions(skip)) : "");
writeFileSync(outPath, JSON.stringify({
  with_specials: cases.texts.map((text) => tokenizer.encode(text, { add_special_tokens: true }).ids),
  without_specials: cases.texts.map((text) => tokenizer.encode(text, { add_special_tokens: false }).ids),
  decoded: cases.id_lists.map((ids) => decode(ids, false)),
  decoded_skipping_specials: cases.id_lists.map((ids) => decode(ids, true)),
}));
