// ajv 8 as a JSON Schema oracle for structgen's tests, driven by tests/oracles/ajv.py.
//
// usage: node ajv_server.cjs NODE_MODULES_DIR
// Reads one JSON request per line on stdin and writes one JSON reply per line on stdout:
//   {"sid": 3, "schema": "<schema JSON text, sent the first time sid 3 is used>",
//    "draft": "2020-12", "texts": ["<instance JSON text>", ...]}
//   -> {"valid": [true, false, ...]}
//    | {"error": "...", "kind": "schema"}    the schema does not compile (no verdict)
//    | {"error": "...", "kind": "instance"}  an instance text is not JSON
//    | {"error": "...", "kind": "request"}   a malformed request
// Instances are parsed with JSON.parse, as a JavaScript user of ajv would parse them.
"use strict";

const path = require("node:path");
const readline = require("node:readline");
const { createRequire } = require("node:module");

const modules = process.argv[2];
if (!modules) {
  process.stderr.write("usage: node ajv_server.cjs NODE_MODULES_DIR\n");
  process.exit(2);
}
const load = createRequire(path.join(path.resolve(modules), "structgen-oracle.js"));
const Ajv07 = load("ajv").default;
const Ajv2019 = load("ajv/dist/2019").default;
const Ajv2020 = load("ajv/dist/2020").default;
const Ajv04 = load("ajv-draft-04").default;
const addFormats = load("ajv-formats").default;
const draft06 = load("ajv/dist/refs/json-schema-draft-06.json");

// strict mode off (real-world schemas carry unknown keywords and formats), the first error only,
// formats asserted (ajv-formats, full mode), patterns compiled as `new RegExp(p, "u")`.
const OPTIONS = { strict: false, allErrors: false, logger: false, unicodeRegExp: true };

// draft -> [constructor, the meta-schema id put in the root's `$schema`]
const DRAFTS = {
  "2020-12": [Ajv2020, "https://json-schema.org/draft/2020-12/schema"],
  "2019-09": [Ajv2019, "https://json-schema.org/draft/2019-09/schema"],
  "draft-07": [Ajv07, "http://json-schema.org/draft-07/schema#"],
  "draft-06": [Ajv07, "http://json-schema.org/draft-06/schema#"],
  "draft-04": [Ajv04, "http://json-schema.org/draft-04/schema#"],
};

function newAjv(draft) {
  const ajv = new DRAFTS[draft][0](OPTIONS);
  addFormats(ajv, { mode: "full" });
  if (draft === "draft-06") ajv.addMetaSchema(draft06);
  return ajv;
}

// One ajv instance per draft. Compiled schemas are removed from it again, so that two schemas
// with the same `$id` do not collide; where removal is not enough, a fresh instance compiles.
const instances = {};
const validators = new Map(); // sid -> validate function | {error}

function compile(text, draft) {
  if (!(draft in DRAFTS)) return { error: `ajv has no draft ${draft}` };
  let schema;
  try {
    schema = JSON.parse(text);
  } catch (e) {
    return { error: `the schema is not JSON: ${e.message}` };
  }
  if (schema !== null && typeof schema === "object" && !Array.isArray(schema)) {
    schema = { ...schema, $schema: DRAFTS[draft][1] };
  }
  for (let attempt = 0; attempt < 2; attempt++) {
    if (attempt === 1 || !instances[draft]) instances[draft] = newAjv(draft);
    const ajv = instances[draft];
    try {
      const validate = ajv.compile(schema);
      try {
        ajv.removeSchema(schema);
      } catch (e) {
        instances[draft] = undefined;
      }
      return validate;
    } catch (e) {
      const message = String((e && e.message) || e);
      if (attempt === 0 && /already exists|resolves to more than one schema/.test(message)) {
        continue;
      }
      instances[draft] = undefined; // a failed compile may leave half-added refs behind
      return { error: message };
    }
  }
  return { error: "unreachable" };
}

function handle(line) {
  let request;
  try {
    request = JSON.parse(line);
  } catch (e) {
    return { error: `the request is not JSON: ${e.message}`, kind: "request" };
  }
  const { sid, schema, draft, texts } = request;
  if (!validators.has(sid)) {
    if (typeof schema !== "string") {
      return { error: `schema ${sid} was never sent`, kind: "request" };
    }
    validators.set(sid, compile(schema, draft || "2020-12"));
  }
  const validate = validators.get(sid);
  if (typeof validate !== "function") return { error: validate.error, kind: "schema" };
  const valid = [];
  for (let i = 0; i < texts.length; i++) {
    let instance;
    try {
      instance = JSON.parse(texts[i]);
    } catch (e) {
      return { error: `instance ${i} is not JSON: ${e.message}`, kind: "instance" };
    }
    try {
      valid.push(validate(instance) === true);
    } catch (e) {
      return { error: `ajv failed on instance ${i}: ${(e && e.message) || e}`, kind: "schema" };
    }
  }
  return { valid };
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  let reply;
  try {
    reply = handle(line);
  } catch (e) {
    reply = { error: String((e && e.stack) || e), kind: "request" };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
});
