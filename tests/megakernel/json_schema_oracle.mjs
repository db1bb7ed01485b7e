// The oracle of the JSON Schema tests (tests/common/schema_oracle.h): Ajv, a JSON Schema validator for
// draft 2020-12, says whether each document is valid under its case's schema.
//   node json_schema_oracle.mjs AJV_DIR CASES_FILE OUT_FILE
// AJV_DIR: the ajv package (from scripts/fetch-tokenizers); CASES_FILE: [{"schema": S, "documents": [text,
// ...]}]; OUT_FILE gets, per case, per document: true (valid), false (JSON, not valid), null (not JSON).
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const [ajvDir, casesFile, outFile] = process.argv.slice(2);
const require = createRequire(path.join(ajvDir, 'package.json'));
const Ajv2020 = require('./dist/2020.js').default;
// strict off: annotations such as "format" are read as JSON Schema reads them by default (not asserted).
const ajv = new Ajv2020({ strict: false, validateFormats: false });
const cases = JSON.parse(readFileSync(casesFile, 'utf8'));
const results = cases.map(({ schema, documents }) => {
  const validate = ajv.compile(schema);
  return documents.map((text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      return null;
    }
    return validate(value);
  });
});
writeFileSync(outFile, JSON.stringify(results));
