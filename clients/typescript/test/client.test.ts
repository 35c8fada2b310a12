// The client against a real `memroute serve` on loopback. tests/clients/test_typescript_client.py starts the
// server, creates the keys and runs `npm test` with MEMROUTE_URL, MEMROUTE_ADMIN_KEY, MEMROUTE_KEY_A and
// MEMROUTE_KEY_B (keys of tenants "tenant-a" and "tenant-b") in the environment.
import assert from "node:assert/strict";
import { test } from "node:test";

import { MemrouteClient, MemrouteError } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through tests/clients/test_typescript_client.py`);
  return value;
}

const baseUrl = env("MEMROUTE_URL");
const admin = new MemrouteClient({ baseUrl, apiKey: env("MEMROUTE_ADMIN_KEY") });
const alice = new MemrouteClient({ baseUrl, apiKey: env("MEMROUTE_KEY_A") });
const bob = new MemrouteClient({ baseUrl, apiKey: env("MEMROUTE_KEY_B") });

async function rejects(call: Promise<unknown>, status: number): Promise<MemrouteError> {
  try {
    await call;
  } catch (error) {
    assert.ok(error instanceof MemrouteError, String(error));
    assert.equal(error.status, status, error.message);
    return error;
  }
  assert.fail(`expected a ${status} error`);
}

test("add, get, update, search, list and delete a memory", async () => {
  const memory = await alice.add({ content: "I prefer TypeScript over JavaScript", key: "preference:language" });
  assert.equal(memory.apiKeyId, "tenant-a");
  assert.equal((await alice.get(memory.id)).content, "I prefer TypeScript over JavaScript");
  const again = await alice.add({ content: "I prefer TypeScript, always", key: "preference:language" });
  assert.equal(again.id, memory.id); // an upsert on the key

  const updated = await alice.update(memory.id, { content: "I prefer TypeScript with strict mode" });
  assert.equal(updated.content, "I prefer TypeScript with strict mode");
  const found = await alice.search({ query: "TypeScript strict", limit: 5 });
  assert.equal(found.hits[0]?.memory.id, memory.id);
  assert.ok(found.provenance.legs.length > 0);
  const page = await alice.list({ limit: 10 });
  assert.equal(page.total, 1);
  assert.deepEqual(page.data.map((m) => m.id), [memory.id]);

  await alice.delete(memory.id);
  await rejects(alice.get(memory.id), 404);
  // the history outlives the memory: every change, oldest first, with what it said before
  const history = await alice.history(memory.id);
  assert.deepEqual(history.entries.map((e) => e.event), ["created", "updated", "updated", "deleted"]);
  assert.equal(history.entries[2]?.oldContent, "I prefer TypeScript, always");
  assert.equal(history.current, null);
  await rejects(bob.history(memory.id), 404); // another tenant's memory answers like a missing one
});

test("one tenant never sees or touches the other's memories", async () => {
  const secret = await alice.add({ content: "Project Bluebird launches in March" });
  await rejects(bob.get(secret.id), 404);
  await rejects(bob.delete(secret.id), 404);
  assert.equal((await bob.search("Bluebird")).hits.length, 0);
  await rejects(bob.list({ apiKeyId: "tenant-a" }), 403);
  assert.equal((await alice.get(secret.id)).content, "Project Bluebird launches in March");
});

test("bad input is a MemrouteError with field details", async () => {
  const error = await rejects(alice.add({ content: "" }), 422);
  assert.ok(error.details.some((detail) => detail.field.includes("content")), JSON.stringify(error.details));
  await rejects(new MemrouteClient({ baseUrl, apiKey: "mr_not-a-key" }).list(), 401);
  await rejects(alice.keys.list(), 403);
});

test("keys, and an app key acting for its end users", async () => {
  const created = await admin.keys.create({ name: "cafe", tenant: "cafe", endUsers: true, scopes: ["read", "write"] });
  assert.ok(created.secret.startsWith("mr_"));
  assert.equal(created.key.endUsers, true);
  assert.ok((await admin.keys.list()).some((key) => key.id === created.key.id));

  const cafe = new MemrouteClient({ baseUrl, apiKey: created.secret });
  const u1 = cafe.forEndUser("u1");
  const u2 = cafe.forEndUser("u2");
  await u1.add({ content: "I am vegetarian", key: "diet" });
  await u2.add({ content: "I love steak", key: "diet" });
  assert.deepEqual((await u1.search("what do I eat")).hits.map((hit) => hit.memory.content), ["I am vegetarian"]);
  assert.deepEqual((await u2.list()).data.map((m) => m.apiKeyId), ["cafe/u2"]);
  await rejects(cafe.list(), 422); // an app key must name its end user
  assert.deepEqual((await cafe.users.list()).data, ["u1", "u2"]);

  const erased = await cafe.users.erase("u1");
  assert.equal(erased.deleted, 1);
  assert.equal(erased.complete, true);
  assert.equal((await u1.list()).total, 0);
  assert.equal((await u2.list()).total, 1);

  const rotated = await admin.keys.rotate(created.key.id);
  assert.equal(rotated.key.endUsers, true);
  await rejects(cafe.users.list(), 401); // the old secret died with the rotation
  assert.ok((await admin.keys.revoke(rotated.key.id)).revokedAt);
});
