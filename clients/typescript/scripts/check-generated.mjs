// Fails when src/schema.ts is not what openapi-typescript generates from openapi.json (the server's document,
// written by `python scripts/export_openapi.py` at the repository root): run `npm run generate` after changing it (the same options as here).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";

const root = new URL("../", import.meta.url);
const generated = astToString(await openapiTS(new URL("openapi.json", root), { defaultNonNullable: false }));
const committed = readFileSync(fileURLToPath(new URL("src/schema.ts", root)), "utf8");
const body = (text) => text.slice(text.indexOf("export interface paths"));
if (body(generated).trim() !== body(committed).trim()) {
  console.error("src/schema.ts is out of date with openapi.json: run `npm run generate`");
  process.exit(1);
}
console.log("src/schema.ts matches openapi.json");
