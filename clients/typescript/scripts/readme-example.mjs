// Writes the README's example to test/readme.example.ts (the package name resolved to the source and the base URL
// taken from the environment), so `npm test` compiles and runs exactly what the README shows.
import { readFileSync, writeFileSync } from "node:fs";

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const example = readme.match(/```ts\n([\s\S]*?)```/)?.[1];
if (!example) throw new Error("README.md has no ts example");
const runnable = example
  .replace('from "@memroute/client"', 'from "../src/index.js"')
  .replace('const baseUrl = "http://127.0.0.1:8765";', "const baseUrl = process.env.MEMROUTE_URL!;");
writeFileSync(new URL("../test/readme.example.ts", import.meta.url),
  "// Generated from README.md by scripts/readme-example.mjs: edit the README, not this file.\nexport {};\n" + runnable);
