// Tests of the built {{name}} batch handler: `./build.sh` builds the
// component, then each test calls it once on a batch of messages through
// `sluice invoke --json`, in the sandbox `sluice run` uses, and asserts on
// what it did.
//
// Run them in the project's folder with `node --test` (node 20+). They need
// the sluice binary: set SLUICE to its path, or put `sluice` on PATH.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const project = fileURLToPath(new URL('..', import.meta.url));
const name = '{{name}}';
const wasm = join(project, `${name}.wasm`);
const sluice = process.env.SLUICE || 'sluice';
const scratch = mkdtempSync(join(tmpdir(), `${name}-test-`));
let calls = 0;

// Finds sluice, then builds the component once for all the tests.
before(() => {
  const version = spawnSync(sluice, ['--version'], { encoding: 'utf8' });
  if (version.error || version.status !== 0) {
    throw new Error(
      process.env.SLUICE
        ? `SLUICE=${sluice} does not run (${version.error?.message ?? version.stderr}): point it at the sluice binary`
        : 'sluice not found: set SLUICE to the sluice binary, or put it on PATH ' +
            '(`cargo install --locked --path .` in a clone of the sluice repository)',
    );
  }
  const build = spawnSync(join(project, 'build.sh'), { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (build.error || build.status !== 0) {
    throw new Error(`build.sh failed: ${build.error?.message ?? ''}\n${build.stdout}${build.stderr}`);
  }
});

after(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * Calls the handler once on a batch of messages with these payloads (and
 * `sluice invoke` options such as `--set KEY=VALUE`): the JSON report.
 * @param {(string | Uint8Array)[]} payloads
 * @param {string[]} args
 */
function invoke(payloads, ...args) {
  const command = ['--json', 'invoke', wasm];
  for (const payload of payloads) {
    // From a file: an argument cannot carry bytes that are not UTF-8.
    const file = join(scratch, `payload-${++calls}`);
    writeFileSync(file, payload);
    command.push('--payload', `@${file}`);
  }
  command.push(...args);
  const run = spawnSync(sluice, command, { cwd: project, encoding: 'utf8' });
  if (run.status === 1 || run.status === 2 || run.status === null) {
    assert.fail(`sluice ${command.join(' ')} failed (status ${run.status}):\n${run.stderr}`);
  }
  const report = JSON.parse(run.stdout);
  // The exit status says how the call ended: 0 every message done, else
  // that of the first one not done (10 retry, 11 reject, 12 snooze), or 20
  // trap, 21 timeout, 22 memory limit for the whole call.
  assert.equal(report.status, run.status, run.stderr);
  return report;
}

/** @param {{ logs: { level: string, message: string }[] }} report */
function infoLines(report) {
  return report.logs.filter((line) => line.level === 'info').map((line) => line.message);
}

test('each message of a batch is done and logged', () => {
  const report = invoke(['one', 'two']);
  assert.equal(report.status, 0);
  assert.deepEqual(report.outcomes, [{ outcome: 'done' }, { outcome: 'done' }]);
  const [first, second] = report.ids;
  assert.deepEqual(infoLines(report), [
    `${name}: 2 messages`,
    `${name}: message ${first} attempt 1`,
    `${name}: message ${second} attempt 1`,
  ]);
  assert.deepEqual(report.publishes, []);
});

test('forward_to publishes each payload', () => {
  const report = invoke(['one', 'two'], '--set', 'forward_to=elsewhere');
  assert.deepEqual(report.outcomes, [{ outcome: 'done' }, { outcome: 'done' }]);
  assert.deepEqual(
    report.publishes.map((p) => [p.queue, p.payload]),
    [
      ['elsewhere', 'one'],
      ['elsewhere', 'two'],
    ],
  );
  assert.equal(report.publishes_committed, true);
});

test('each message is settled by its own outcome', () => {
  // The second payload is not UTF-8: that message alone is rejected.
  const report = invoke(['one', new Uint8Array([0xff, 0xfe])], '--set', 'forward_to=elsewhere');
  assert.equal(report.status, 11);
  assert.deepEqual(report.outcomes, [
    { outcome: 'done' },
    { outcome: 'reject', reason: 'payload is not UTF-8' },
  ]);
  assert.deepEqual(
    report.publishes.map((p) => p.payload),
    ['one'],
  );
});
