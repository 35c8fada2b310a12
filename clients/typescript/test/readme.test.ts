// The README's example (test/readme.example.ts, written from README.md by scripts/readme-example.mjs) runs
// against the real server and prints what the README says.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

test("the README example runs", () => {
  const script = fileURLToPath(new URL("./readme.example.js", import.meta.url));
  const run = spawnSync(process.execPath, [script], {
    encoding: "utf8",
    env: { ...process.env, MEMROUTE_KEY: process.env.MEMROUTE_KEY_B },
  });
  assert.equal(run.status, 0, run.stderr);
  assert.deepEqual(run.stdout.trim().split("\n"), [
    "I prefer TypeScript over JavaScript 1 [ 'created', 'updated', 'deleted' ]",
    "{ tenant: 'shop', data: [ 'u1' ] }",
    "true",
    "404 Memory not found",
  ]);
});
