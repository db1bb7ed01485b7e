// The oracle of the JSON Schema tests (tests/common/schema_oracle.h): Ajv, a JSON Schema validator for
// draft 2020-12, with ajv-formats, says whether each document is valid under its case's schema.
//   node json_schema_oracle.mjs AJV_DIR CASES_FILE OUT_FILE
// AJV_DIR: the ajv package (from scripts/fetch-tokenizers; ajv-formats beside it); CASES_FILE: [{"schema": S, "documents": [text,
// ...]}]; OUT_FILE gets, per case, per document: true (valid), false (JSON, not valid), null (not JSON).
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const [ajvDir, casesFile, outFile] = process.argv.slice(2);
const require = createRequire(path.join(ajvDir, 'package.json'));
const Ajv2020 = require('./dist/2020.js').default;
const addFormats = require('../ajv-formats/dist/index.js').default;
// strict off: keywords Ajv does not know are left alone. Formats are asserted (ajv-formats' full checks:
// days in the month, leap years), as the replies are held to them.
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
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
