// graphile-worker as punctual-bench's peer: one task, `fire`, making the call Punctual's
// executor makes to the bench's sink (a POST naming the occurrence in Idempotency-Key).
// A job whose call fails fails, and graphile-worker retries it.
//
// Settings from the environment, set by punctual-bench: DATABASE_URL, PEER_CONCURRENCY
// (jobs at once), PEER_POOL (Postgres connections), PEER_POLL_MS (how often an idle worker
// looks for jobs that became due; new jobs already due are announced by NOTIFY).
"use strict";

const { run, Logger } = require("graphile-worker");

// Warnings and errors only: graphile-worker logs every completed job at info, which at
// thousands of jobs a second would be much of the work measured.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    console.error(`${level}: ${message}`);
  }
});

const number = (name, fallback) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`${name} must be a positive integer, not ${process.env[name]}`);
  }
  return value;
};

async function main() {
  const runner = await run({
    connectionString: process.env.DATABASE_URL,
    concurrency: number("PEER_CONCURRENCY", 50),
    maxPoolSize: number("PEER_POOL", 20),
    pollInterval: number("PEER_POLL_MS", 100),
    noHandleSignals: false,
    logger,
    taskList: {
      fire: async (payload) => {
        const response = await fetch(payload.url, {
          method: "POST",
          headers: { "idempotency-key": payload.key, "content-type": "application/json" },
          body: "{}",
        });
        await response.arrayBuffer();
        if (!response.ok) {
          throw new Error(`HTTP ${response.status}`);
        }
      },
    },
  });
  // punctual-bench waits for this line: the schema is migrated and the workers are polling.
  console.log("ready");
  await runner.promise;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
