// The published package: `npm pack` takes exactly the files a user needs
// (the same files `sluice new --lang js` copies into a project's sdk/), and
// its entry points exist.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

export const FILES = [
  'README.md',
  'index.d.ts',
  'package.json',
  'src/duration.js',
  'src/handler.js',
  'src/host.js',
  'src/index.js',
  'src/message.js',
  'src/outcome.js',
  'src/show.js',
  'wit.d.ts',
];

test('npm pack takes exactly the package files', () => {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' });
  const [packed] = JSON.parse(out);
  assert.equal(packed.name, 'sluice-sdk');
  assert.equal(packed.version, '0.2.0');
  assert.deepEqual(packed.files.map((f) => f.path).sort(), FILES);
});

test('the entry points named in package.json exist', () => {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.equal(pkg.type, 'module');
  for (const path of [pkg.exports['.'].default, pkg.exports['.'].types, pkg.types]) {
    assert.ok(existsSync(new URL(`../${path}`, import.meta.url)), path);
  }
});

test('the declarations name every export of the entry point', async () => {
  const sdk = await import('../src/index.js');
  const dts = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
  for (const name of Object.keys(sdk)) {
    assert.match(dts, new RegExp(`export declare (function|const|class) ${name}\\b`), name);
  }
});
